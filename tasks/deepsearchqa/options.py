"""DeepSearchQA's options (`a2rl tasks deepsearchqa`; `-T key=value`,
`[tasks.deepsearchqa]`). The judge's settings stay global (`judge_*`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..options import TaskOptions


class DeepSearchQAOptions(TaskOptions):
    data_dir: str = Field("", description="folder with DeepSearchQA's DSQA-full.csv instead "
                          "of the Hugging Face hub")
    corpus: str = Field("", description="offline search corpus: a jsonl file (or folder of "
                        "them) of {id, title, text}")
    search_url: str = Field("", description="web search endpoint (POST JSON {query, k}); "
                            "used over the corpus when its key is set")
    search_key_env: str = Field("A2RL_SEARCH_API_KEY", description="name of the variable "
                                "holding the web search endpoint's key")

    legacy_settings: ClassVar[dict[str, str]] = {
        "data_dir": "deepsearchqa_dir", "corpus": "deepsearchqa_corpus",
        "search_url": "deepsearchqa_search_url", "search_key_env": "deepsearchqa_search_key_env"}
