"""GSM8K's options (`a2rl tasks gsm8k`; `-T key=value`, `[tasks.gsm8k]`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..options import TaskOptions


class GSM8KOptions(TaskOptions):
    data_dir: str = Field("", description="folder with GSM8K train.jsonl and test.jsonl (in "
                          "the dataset's schema) instead of the Hugging Face hub")

    legacy_settings: ClassVar[dict[str, str]] = {"data_dir": "gsm8k_dir"}
