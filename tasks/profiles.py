"""Evaluation profiles: `a2rl` (ours, the default) and `paper` (the reference harness's).

Why two: a user wants numbers they can set beside the paper's (microsoft/RD-Agent,
`rdagent/scenarios/rl/autorl_bench`), and our stricter default protocol (a dev split held back
from the visible data, our prompts and extraction). A task is built for one profile with
`get_task(task_id, profile)` (`Task.with_profile`); the profile is recorded on the run and in
every evaluation's provenance. The `paper` settings of each task, and every difference that
remains, are listed in docs/paper-fidelity.md.

The profile is independent of the run *protocol* (`heldout`: dev scores during the run, test
at the end; `paper`: test every time), which governs what the agent learns while it works.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

Profile = Literal["a2rl", "paper"]
PROFILES: tuple[str, ...] = get_args(Profile)
DEFAULT_PROFILE: Profile = "a2rl"

#: Which tasks the reference harness has (its autorl_bench/benchmarks/__init__.py: BENCHMARKS,
#: minus the `smith-*` ones discovered at run time) each task declares itself
#: (`Task.has_paper_profile`); a2rl's own tasks (the toys) have no paper counterpart.
#: What a toy task (`TaskSpec.toy`: arith, textquest) does under `paper`: the paper has no such
#: task, so there is nothing to be faithful to; it accepts the profile (a fleet over a plan
#: with a toy runs under `--profile paper`) and evaluates exactly as under `a2rl`, which its
#: spec's notes and every evaluation's provenance (`evaluated_as`) say.
TOY_PAPER_NOTE = "the a2rl evaluation, unchanged: the paper has no such task"

#: The paper's time budget per run (the issue). Not the harness's default: its run.py defaults
#: to --timeout 3600; its README's example runs pass --timeout 41600 (about 11.6 h).
PAPER_BUDGET = "12h"


def check_profile(profile: str) -> Profile:
    """`profile` as a `Profile`, or a one-line ValueError naming the choices."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {profile!r}")
    return cast(Profile, profile)
