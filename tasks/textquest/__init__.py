"""The offline level-3 toy task `textquest`: see `task.py`, `game.py` and `description.md`."""

from .task import TextQuestTask

__all__ = ["TextQuestTask"]
