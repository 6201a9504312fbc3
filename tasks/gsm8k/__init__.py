"""GSM8K (level 1): grade-school math word problems; see `task.py` and `description.md`."""

from .task import GSM8KTask

__all__ = ["GSM8KTask"]
