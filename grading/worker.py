"""`python -m a2rl.grading.worker`: one evaluation in its own process.

Why a process: an evaluation loads untrusted weights and may run out of memory, hang or crash
the interpreter. The caller (`a2rl.grading.queue.process_one`) imposes a timeout, kills the
whole process group if needed and records the failure; the server survives.

The worker never reads or writes the store. It reads its job from a JSON spec
(`--spec '{"task_id": ..., "checkpoint_dir": ..., "split": ..., "settings": {...}}'`, built from
the grade request by `a2rl.grading.queue.spec_for`), builds the task with the loader the task
registry registered (`seam.task_loader`, named in the spec) and writes the `EvalResult` as JSON to
`--out FILE` (or stdout). Exit 0 on success, 2 on a usage error,
1 on an evaluation error (the traceback goes to stderr), 3 when the model does not fit in the
GPU's free memory beside the agent's job (one line on stderr saying how much is needed and
free; see `gpu_memory`).

One evaluation per process also keeps the GPU clean: whatever the engine allocated goes back
to the device when the worker exits, whichever way it exits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from a2rl.settings import Settings
from a2rl.store.run_config import EvaluationConfig

from .gpu_memory import GpuMemoryUnavailable
from .seam import load_task, task_loader


class WorkerSpec(BaseModel):
    task_id: str
    profile: str = "a2rl"  # the run's evaluation profile (a2rl.tasks.profiles)
    #: the run's task options as recorded when it was made (a2rl.tasks.options): the grader
    #: evaluates with exactly those, whatever its own settings say
    task_options: dict[str, Any] = {}
    checkpoint_dir: str
    split: str
    settings: dict[str, Any] = {}
    #: `"module:attr"` of the `seam.TaskLoader` that builds the task (default: the one the task
    #: registry registered in the process that makes the spec)
    task_loader: str = Field(default_factory=task_loader)
    #: the run's frozen evaluation config (`a2rl.grading.frozen`): its generation settings
    #: are used as they are, and the task's code must be of its version unless `regrade`
    evaluation: EvaluationConfig | None = None
    regrade: bool = False


class TaskChanged(RuntimeError):
    """The task's code here is not of the version the run's evaluations are."""


def run_spec(spec: WorkerSpec) -> str:
    from .evaluate import evaluate

    task = load_task(spec.task_loader, spec.task_id, spec.profile, spec.task_options)
    frozen = spec.evaluation
    if frozen is not None and not spec.regrade and frozen.task_version \
            and task.spec.version != frozen.task_version:
        raise TaskChanged(
            f"cannot grade under the run's frozen evaluation config: task {spec.task_id} is "
            f"version {task.spec.version} here, the run's evaluations are version "
            f"{frozen.task_version} (grade it with that a2rl, or `a2rl regrade` it after)")
    result = evaluate(task, Path(spec.checkpoint_dir), spec.split,  # type: ignore[arg-type]
                      Settings(**spec.settings),
                      generation=frozen.generation if frozen is not None else None)
    return result.model_dump_json()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m a2rl.grading.worker",
                                     description="Evaluate one checkpoint on one split.")
    parser.add_argument("--spec", required=True, help="JSON WorkerSpec")
    parser.add_argument("--out", help="write the EvalResult JSON here (default stdout)")
    args = parser.parse_args(argv)
    spec = WorkerSpec.model_validate_json(args.spec)
    try:
        text = run_spec(spec)
    except GpuMemoryUnavailable as exc:  # a plain status for the agent, not a traceback
        sys.stderr.write(f"{exc}\n")
        return 3
    except TaskChanged as exc:
        sys.stderr.write(f"{exc}\n")
        return 4
    if args.out:
        tmp = Path(args.out + ".tmp")
        tmp.write_text(text)
        tmp.rename(args.out)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
