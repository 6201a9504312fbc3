"""The environment API of interactive (level-3) tasks. Standard library only.

Why one file for both sides: the grader imports this module to build its rollout prompts and to
parse actions, and the very same file is written into the workspace as `env/a2rl_env.py` for
the agent's training code. What the agent trains on is then exactly what the grader sends.

Inside the workspace (run from the workspace root):

    import sys; sys.path.insert(0, "env")
    import a2rl_env
    ids = a2rl_env.train_ids()
    pool = a2rl_env.make_pool([ids[0]] * 8)    # a group of 8 episodes of one instance
    pool.reset()
    while pool.active():
        idx = pool.active()
        outputs = my_policy(pool.prompts(idx))  # model outputs (text)
        pool.step(dict(zip(idx, outputs)))
    rewards = [ep.total_reward for ep in pool.episodes]

Only training instances can be made here: dev and test instances are graded by the harness and
are generated from secrets that never enter the workspace. See env/README.md.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

HERE = Path(__file__).resolve().parent
SEPARATOR = " | "


class SplitError(ValueError):
    """A request for something other than a training instance."""


@dataclass
class Step:
    """What the environment returns from `reset` and `step`."""

    observation: str
    reward: float = 0.0
    done: bool = False
    admissible: list[str] | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Env(Protocol):
    def reset(self) -> Step: ...

    def step(self, action: str) -> Step: ...


@dataclass
class Episode:
    """The record of one episode (the grader stores it with the evaluation)."""

    id: str
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)  # [0] is the reset observation
    rewards: list[float] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # raw model outputs, one per action
    done: bool = False
    success: bool = False
    error: str | None = None

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def steps(self) -> int:
        return len(self.actions)

    def transcript(self) -> str:
        parts = [f"{o} > {a}" for o, a in zip(self.observations, self.actions, strict=False)]
        if len(self.observations) > len(self.actions):
            parts.append(self.observations[len(self.actions)])
        if self.error:
            parts.append(f"error: {self.error}")
        return SEPARATOR.join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_reward": self.total_reward, "steps": self.steps}


def render_prompt(instruction: str, history: Sequence[tuple[str, str]], observation: str,
                  admissible: Sequence[str] | None = None, window: int = 1) -> str:
    """The one-line prompt: instruction, the last `window` (observation, action) pairs of
    earlier steps (what was seen, what was done), the current observation, and the admissible
    actions when the env gives them."""
    parts = [instruction] if instruction else []
    recent = list(history)[-window:] if window > 0 else []
    parts += [f"{obs} > {action}" for obs, action in recent]
    parts.append(f"Now: {observation}")
    if admissible:
        parts.append("Actions: " + ", ".join(admissible))
    return SEPARATOR.join(parts)


def parse_action(output: str) -> str:
    """A model output as an action: its first line, whitespace collapsed, lower-cased."""
    lines = output.strip().splitlines()
    return " ".join(lines[0].split()).lower() if lines else ""


def _error(exc: BaseException) -> str:
    tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return tail[:500]


class EnvPool:
    """Many episodes stepped together; one that raises ends as failed, the others go on.

    `factories[i]()` makes the env of episode `i` (called by `reset`, so a broken instance
    fails its episode only). The pool keeps each episode's history and renders the grader's
    prompt for it (`prompts`).
    """

    def __init__(self, ids: Sequence[str], factories: Sequence[Callable[[], Env]], *,
                 instruction: str = "", window: int = 1, max_steps: int = 10) -> None:
        if len(ids) != len(factories):
            raise ValueError(f"{len(ids)} ids but {len(factories)} factories")
        self.ids, self.factories = list(ids), list(factories)
        self.instruction, self.window, self.max_steps = instruction, window, max_steps
        self.envs: list[Env | None] = [None] * len(ids)
        self.last: list[Step | None] = [None] * len(ids)
        self.episodes: list[Episode] = [Episode(id=i) for i in self.ids]

    def __len__(self) -> int:
        return len(self.ids)

    def reset(self) -> list[Step | None]:
        """Make and reset every env; a failure marks that episode done with its error."""
        self.episodes = [Episode(id=i) for i in self.ids]
        for i, factory in enumerate(self.factories):
            try:
                env = factory()
                step = env.reset()
            except Exception as exc:  # noqa: BLE001 - one instance must not stop the others
                self._fail(i, exc)
                continue
            self.envs[i], self.last[i] = env, step
            self.episodes[i].observations.append(step.observation)
            self._finish_if_done(i, step)
        return list(self.last)

    def active(self) -> list[int]:
        """Indices of episodes still running (not done, under the step limit)."""
        return [i for i, ep in enumerate(self.episodes)
                if not ep.done and ep.error is None and ep.steps < self.max_steps]

    def prompts(self, indices: Sequence[int] | None = None) -> list[str]:
        """The grader's prompt for each episode in `indices` (default: the active ones)."""
        indices = self.active() if indices is None else indices
        out = []
        for i in indices:
            step = self.last[i]
            if step is None:
                raise ValueError(f"episode {i} has no observation (reset failed or not called)")
            ep = self.episodes[i]
            history = list(zip(ep.observations, ep.actions, strict=False))
            out.append(render_prompt(self.instruction, history, step.observation,
                                     step.admissible, self.window))
        return out

    def step(self, outputs: Mapping[int, str]) -> dict[int, Step | None]:
        """Apply one model output per episode index (parsed with `parse_action`). Returns the
        new step of each (None where the env raised; that episode is then failed)."""
        result: dict[int, Step | None] = {}
        for i, output in outputs.items():
            ep, env = self.episodes[i], self.envs[i]
            if env is None or ep.done or ep.error is not None:
                raise ValueError(f"episode {i} is not active")
            action = parse_action(output)
            ep.outputs.append(output)
            ep.actions.append(action)
            try:
                step = env.step(action)
            except Exception as exc:  # noqa: BLE001
                ep.observations.append("")
                ep.rewards.append(0.0)
                self._fail(i, exc)
                result[i] = None
                continue
            self.last[i] = step
            ep.observations.append(step.observation)
            ep.rewards.append(float(step.reward))
            self._finish_if_done(i, step)
            result[i] = step
        return result

    def _finish_if_done(self, i: int, step: Step) -> None:
        ep = self.episodes[i]
        if step.done:
            ep.done = True
        if step.done or "success" in step.info:
            ep.success = bool(step.info.get("success", ep.total_reward > 0))

    def _fail(self, i: int, exc: BaseException) -> None:
        ep = self.episodes[i]
        ep.done, ep.success, ep.error = True, False, _error(exc)
        self.envs[i] = None


# --- the workspace side: training instances only ------------------------------------------------
class Playing(Protocol):
    """One running episode of a loop of its own (a reference harness's, under the `paper`
    profile): its env, its record, the prompt of its next step, and what a completion does."""

    env: Any
    record: Episode

    def prompt(self) -> Any: ...

    def act(self, completion: str) -> None: ...


def play_together(ids: Sequence[str], starts: Sequence[Callable[[], Playing]],
                  generate: Callable[[list[Any]], list[str]], max_steps: int) -> list[Episode]:
    """Play episodes all stepped together, as `EnvPool` does for our own prompt: `starts[i]()`
    makes and resets episode `i`, then each step is **one** `generate` call over the prompts
    of the episodes still running. An episode whose start or step raises ends as failed with
    the error recorded; the others go on. Every env is closed at the end (if it can be)."""
    episodes: list[Playing] = []
    records: list[Episode] = []
    for eid, start in zip(ids, starts, strict=True):
        try:
            episode = start()
        except Exception as exc:  # noqa: BLE001 - one instance must not stop the others
            records.append(Episode(id=eid, done=True, error=_error(exc)))
            continue
        episodes.append(episode)
        records.append(episode.record)
    for _ in range(max_steps):
        active = [e for e in episodes if not e.record.done and e.record.error is None]
        if not active:
            break
        for episode, completion in zip(active, generate([e.prompt() for e in active]),
                                       strict=True):
            try:
                episode.act(completion)
            except Exception as exc:  # noqa: BLE001
                episode.record.done, episode.record.error = True, _error(exc)
    for episode in episodes:
        close = getattr(episode.env, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # closing a finished game
                close()
    return records


def manifest() -> dict[str, Any]:
    """env/manifest.json: the task's rollout settings (the grader uses the same)."""
    return json.loads((HERE / "manifest.json").read_text())


def _backend() -> Any:
    name = manifest()["backend"]
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(name)


def _refuse(what: str) -> SplitError:
    return SplitError(f"{what}: only training instances are available here (see train_ids()); "
                      "dev and test instances are graded by the harness and are not available "
                      "in the workspace")


def train_ids(split: str = "train") -> list[str]:
    """Every training instance id, in a stable order. Any other split is refused."""
    if split != "train":
        raise _refuse(f"split {split!r}")
    return list(_backend().train_ids())


def make(instance_id: str) -> Env:
    """The env of one training instance (not reset yet)."""
    backend = _backend()
    if instance_id not in set(backend.train_ids()):
        raise _refuse(f"instance {instance_id!r}")
    return backend.make_train_env(instance_id)


def make_pool(instance_ids: Sequence[str]) -> EnvPool:
    """A pool over training instances (repeat an id for a GRPO group), with the task's
    instruction, history window and step limit."""
    backend, m = _backend(), manifest()
    known = set(backend.train_ids())
    for iid in instance_ids:
        if iid not in known:
            raise _refuse(f"instance {iid!r}")
    factories = [(lambda iid=iid: backend.make_train_env(iid)) for iid in instance_ids]
    return EnvPool(instance_ids, factories, instruction=m["instruction"],
                   window=m["history_window"], max_steps=m["max_steps"])
