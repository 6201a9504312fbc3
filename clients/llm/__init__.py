"""The `llm` connector: our own minimal tool-calling agent over any OpenAI-compatible endpoint.

Agent CLIs bring their own loop, prompts and context management, which makes them hard to
compare with a plain model. This loop is deliberately small and fixed, so that a run measures
the driver model (`--model`, served by vLLM, llama.cpp, a hosted API, ...) rather than the
scaffold: the MCP server's instructions as the system message, the task prompt as the first user
message, our MCP tools offered as OpenAI function tools, and nothing else.

One module per job:

- `connector`: `LlmConnector`, what the harness sees (configuration checks, the endpoint's
  check before the run, the last run's transcript and stop);
- `options`: the options the user gives (`LlmAgentOptions`) and the loop reads (`LlmOptions`);
- `loop`: `ChatLoop`, the turns, their requests under the shared retry policy, the stop rules
  and the spending limits;
- `context`: the context policy that keeps the messages sent within their budget;
- `tool_calls`: our MCP tools as OpenAI function tools, each call run and its result as text;
- `transcript`: the events the loop records, and how they are read back for the viewer.
"""

from .connector import LlmConnector
from .options import LlmAgentError, LlmAgentOptions, LlmOptions

__all__ = ["LlmAgentError", "LlmAgentOptions", "LlmConnector", "LlmOptions"]
