"""AlpacaEval's options (`a2rl tasks alpacaeval`; `-T key=value`, `[tasks.alpacaeval]`).
The judge's settings stay global (`judge_*`): one client serves every judged task."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..options import TaskOptions


class AlpacaEvalOptions(TaskOptions):
    data_dir: str = Field("", description="folder with the AlpacaEval JSON file and "
                          "alpaca.jsonl instead of the Hugging Face hub")
    reference_file: str = Field("alpaca_eval_gpt4_baseline.json", description="AlpacaEval "
                                "reference outputs (2.0: gpt4 baseline; 1.0: alpaca_eval.json)")

    legacy_settings: ClassVar[dict[str, str]] = {"data_dir": "alpacaeval_dir",
                                                 "reference_file": "alpacaeval_reference_file"}
