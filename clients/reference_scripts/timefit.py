"""Fit a training run to a time limit: measure steps per second on its first steps, plan fewer.

The reference scripts (code/sft.py, code/grpo.py) train a fixed number of steps; on a loaded
machine that can outlast the run's budget, and a checkpoint saved after the deadline can't be
submitted. `TimeLimit` is a TRL/transformers callback: after a few steps it measures the rate,
and when the planned steps would not finish inside the limit it plans fewer (and, for a cosine
schedule, re-shapes the learning rate to end its decay on the new last step); it re-measures as
it goes and stops at the limit whatever the estimate said. `fit_steps` is the arithmetic alone.
Imports nothing from a2rl (it is written into the workspace beside the scripts).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

#: the first steps are slow (allocation, warm caches): the rate is measured after them
SKIP_STEPS = 2
#: steps timed before the first estimate, and the interval between re-estimates
PROBE_STEPS = 10
#: share of a script's limit kept for saving the checkpoint after training
SAVE_SHARE = 0.05


def fit_steps(rate: float, seconds_left: float, done: int, planned: int,
              minimum: int = 1) -> int:
    """How many steps in all to train: `planned`, or fewer when `done` steps are taken and
    `rate` (steps per second) says the rest would not finish in `seconds_left`. Never fewer than
    `done` (taken steps stay taken) nor than `minimum` (unless `planned` is fewer)."""
    if rate <= 0 or math.isnan(rate):  # no measurement yet: keep the plan
        return planned
    fit = done + math.floor(rate * max(0.0, seconds_left))
    return max(done, min(planned, max(fit, minimum)))


def threads_for(cpus: int, load: float) -> int:
    """Torch threads for a machine with `cpus` cores and `load` (1-minute load average): as
    many as there are idle cores, at least one. On a loaded machine the extra threads only
    spin waiting for a core; measured on 2 loaded cores, 1 thread trained 2-5x faster than 2."""
    return max(1, min(cpus, round(cpus - load)))


def set_threads() -> int:
    """Set torch's thread count from the machine's load now (`threads_for`); returns it."""
    import torch  # here: the arithmetic above works without torch (see `_callback_base`)

    n = threads_for(os.cpu_count() or 1, os.getloadavg()[0])
    torch.set_num_threads(n)
    return n


def cosine(total: int, warmup_share: float = 0.05) -> Callable[[int], float]:
    """transformers' cosine-with-warmup factor, for `total` steps (warmup: a share of them)."""
    warmup = max(1, int(total * warmup_share))

    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))

    return factor


def _callback_base() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError:  # the arithmetic above is usable (and testable) without transformers
        return object
    return TrainerCallback


class TimeLimit(_callback_base()):  # type: ignore[misc]
    """Stop training within `limit_s` seconds of `on_train_begin`, planning fewer steps from
    the measured rate. `schedule(total)` gives the learning-rate factor for a plan of `total`
    steps (None: keep the trainer's schedule and only stop early)."""

    def __init__(self, limit_s: float, schedule: Callable[[int], Callable[[int], float]] | None
                 = None, say: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit_s, self.schedule, self.say, self.clock = limit_s, schedule, say, clock
        self.start = 0.0
        self.mark: tuple[int, float] | None = None  # (step, time) the rate is measured from
        self.total: int | None = None  # the plan, once the rate cut it
        self.stopped_at_limit = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **_kw: Any) -> None:
        self.start = self.clock()

    def on_step_end(self, args: Any, state: Any, control: Any,
                    lr_scheduler: Any = None, **_kw: Any) -> None:
        now, step = self.clock(), state.global_step
        elapsed = now - self.start
        if self.total is not None and step >= self.total:  # the plan the rate allowed is done
            control.should_training_stop = True
            return
        if elapsed >= self.limit_s:
            self.stopped_at_limit = control.should_training_stop = True
            self.say(f"time limit: stopping at step {step} after {elapsed:.0f} s")
            return
        if step == SKIP_STEPS:
            self.mark = (step, now)
        elif self.mark and step > self.mark[0] and (step - self.mark[0]) % PROBE_STEPS == 0:
            rate = (step - self.mark[0]) / max(1e-9, now - self.mark[1])
            planned = self.total or state.max_steps
            total = fit_steps(rate, self.limit_s - elapsed, step, planned, minimum=step + 1)
            if total < planned:
                self.total = total
                self.say(f"time limit {self.limit_s:.0f} s at {rate:.2f} steps/s: "
                         f"training {total} steps instead of {planned}")
                if self.schedule and lr_scheduler is not None:
                    factor = self.schedule(total)
                    lr_scheduler.lr_lambdas = [factor for _ in lr_scheduler.lr_lambdas]
