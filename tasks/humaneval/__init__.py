"""HumanEval (level 1): Python function completion, pass@1; see `task.py` and `description.md`."""

from .task import HumanEvalTask

__all__ = ["HumanEvalTask"]
