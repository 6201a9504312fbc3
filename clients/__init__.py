"""Agents that drive a run, and the orchestrator that runs one against a task.

- `orchestrator`: `a2rl run`'s loop: create the run, serve it over MCP, launch the agent
  (sandboxed, headless), stop it at the budget, finalize, summarize.
- `base`: the `Connector` an agent system implements (`AgentContext`, `McpEndpoint`,
  `BaseConnector`); `registry`: the agents by name, built-ins and the `a2rl.agents` entry
  points; `transcript`: the messages every connector's transcript parser returns.
- The connectors, one module each with its own transcript parser: `reference` (the scripted
  reference agent), `llm` (a tool-calling loop over any OpenAI-compatible endpoint; a package
  of its loop, context policy, tool calls and transcript), and the
  agent CLIs `claude_code`, `codex`, `gemini`, `opencode` and `openhands`; `npm_clis` finds
  the pinned npm CLIs (`openhands` its own virtual environment), `prompt` is the task prompt
  every connector hands its agent, `agent_sandbox` the bubblewrap an agent CLI runs in.

Importing the package imports no connector: each is loaded when its agent is first used.
"""
