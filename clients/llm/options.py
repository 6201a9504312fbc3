"""The `llm` agent's options: as the user gives them (`LlmAgentOptions`, strings checked
before the run, listed in docs/agent-options.md) and as the loop reads them (`LlmOptions`).

llm_base_url is required; llm_api_key_env defaults to OPENAI_API_KEY, and without that variable
no Authorization header is sent (local servers), while a variable named explicitly must be set.
llm_temperature and llm_max_tokens are omitted from the requests unless given.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from a2rl.llm import Endpoint, RetryPolicy

from ..base import AgentContext
from ..options import AgentOptions, AgentOptionsError


class LlmAgentError(RuntimeError):
    """A clear, user-facing failure of the llm loop (configuration or model endpoint)."""


class LlmAgentOptions(AgentOptions):
    """Our own loop over an OpenAI-compatible chat completions endpoint (`--model` names the
    model it serves). `--llm-base-url` and `--llm-api-key-env` set the first two."""

    llm_base_url: str = Field("", description="the endpoint, e.g. http://127.0.0.1:8000/v1 "
                              "(required); checked before the run with an authenticated "
                              "GET /models: 401, 403 and 404 refuse the run")
    llm_api_key_env: str = Field("OPENAI_API_KEY", description="the variable holding the "
                                 "endpoint's key; unset, no key is sent (local servers); "
                                 "named explicitly, it must be set")
    llm_max_turns: int = Field(200, ge=1, description="chat requests at most; a run stopped "
                               "there ends as its budget's end (turn limit)")
    llm_tool_output_chars: int = Field(8000, ge=200, description="each tool result is cut "
                                       "to this many characters (head and tail kept)")
    llm_context_chars: int = Field(100_000, ge=1000, description="the messages' size above "
                                   "which the oldest tool outputs, then arguments, are elided")
    llm_retries: int = Field(4, ge=0, description="retries of a transient failure (transport, "
                             "408, 409, 429, 5xx)")
    llm_backoff_s: float = Field(1.0, ge=0, description="the first wait before a retry "
                                 "(doubling, or the server's Retry-After)")
    llm_timeout_s: float = Field(600.0, gt=0, description="timeout of one request, and of "
                                 "one tool call")
    llm_temperature: float | None = Field(None, ge=0, description="sampling temperature; "
                                          "empty: not sent (the server's default)")
    llm_max_tokens: int | None = Field(None, ge=1, description="max_tokens of each request; "
                                       "empty: not sent")


class LlmOptions(BaseModel):
    """The loop's knobs, parsed from the string options of `AgentContext.options`."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    max_turns: int = Field(200, ge=1)
    tool_output_chars: int = Field(8000, ge=200)
    context_chars: int = Field(100_000, ge=1000)
    retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)
    timeout_s: float = Field(600.0, gt=0)
    temperature: float | None = None
    max_tokens: int | None = None

    @classmethod
    def from_context(cls, ctx: AgentContext) -> LlmOptions:
        opts = ctx.options
        if not ctx.model:
            raise LlmAgentError("the llm agent needs a model: pass --model NAME (the model name "
                                "the OpenAI-compatible endpoint serves)")
        try:
            given = LlmAgentOptions.parse("llm", opts)
        except AgentOptionsError as exc:
            raise LlmAgentError(f"invalid llm option: {exc}") from None
        base = given.llm_base_url.strip()
        if not base:
            raise LlmAgentError("the llm agent needs an endpoint: set the llm_base_url option "
                                "(e.g. http://127.0.0.1:8000/v1)")
        values = {name.removeprefix("llm_"): value for name, value in given
                  if name not in ("llm_base_url",)}
        return cls(base_url=base.rstrip("/"), model=ctx.model, **values)

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.base_url, model=self.model, api_key_env=self.api_key_env)

    def policy(self) -> RetryPolicy:
        return RetryPolicy(max_retries=self.retries, backoff_s=self.backoff_s,
                           timeout_s=self.timeout_s)
