"""AlpacaEval 2.0 (level 2): see `task.py`, `length_control.py` and `description.md`."""

from .task import AlpacaEvalTask

__all__ = ["AlpacaEvalTask"]
