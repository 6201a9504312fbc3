"""The toy task `arith`: see `task.py` and `description.md`."""

from .task import ArithTask

__all__ = ["ArithTask"]
