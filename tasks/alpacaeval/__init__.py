"""AlpacaEval 2.0 (level 2): see `task.py`, `judge.py` (the pairwise judge),
`paper_annotator.py` (alpaca_eval's annotator, the `paper` profile), `length_control.py` and
`description.md`."""

from .task import AlpacaEvalTask

__all__ = ["AlpacaEvalTask"]
