"""`[judge]` and `[narrative]`: the OpenAI-compatible endpoints of the tasks' judge
(`tasks/*/judge.py`) and of `a2rl report --narrative` (`analysis/narrative.py`)."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class JudgeSettings(Section):
    base_url: str = Field("https://api.openai.com/v1",
                          description="OpenAI-compatible endpoint of the judge, up to /v1")
    model: str = Field("gpt-4-turbo", description="the judge model (AlpacaEval 2.0's)")
    api_key_env: str = Field("OPENAI_API_KEY",
                             description="name of the variable holding the judge's key")
    max_retries: int = Field(4, ge=0, description="judge retries after a failed request")
    timeout_s: float = Field(120.0, gt=0, description="timeout of one judge request")
    concurrency: int = Field(8, ge=1, description="judge requests in flight")


class NarrativeSettings(Section):
    base_url: str = Field("", description="OpenAI-compatible endpoint for `a2rl report "
                          "--narrative`, up to /v1; empty: judge.base_url")
    model: str = Field("", description="model writing report narratives; empty: judge.model")
    api_key_env: str = Field("", description="name of the variable holding the narrative "
                             "endpoint's key; empty: judge.api_key_env")
    timeout_s: float = Field(60.0, gt=0, description="timeout of one narrative request")
