"""Process "agents" that are plain shell scripts: real processes for the orchestrator's tests
of budgets, crashes and the agent sandbox, without a model."""

from __future__ import annotations

from a2rl import __version__
from a2rl.clients.base import AgentContext, AgentLaunch, BaseConnector
from a2rl.clients.claude_code import ClaudeCodeConnector
from a2rl.clients.options import AgentOptions
from a2rl.clients.registry import AGENTS
from a2rl.clients.transcript import Usage


class ScriptAgent(BaseConnector):
    """Its stdout is plain text, which no agent's parser claims (the viewer shows it as text)."""

    kind = "process"
    script = "true"

    def __init__(self) -> None:
        self.name = self.title = type(self).__name__

    def version(self) -> str:
        return __version__

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        return AgentLaunch(argv=["/bin/bash", "-c", self.script], cwd=ctx.home,
                           env={"A2RL_TEST_MCP_URL": ctx.endpoint.url})


class NeverStops(ScriptAgent):
    # a daemonized child that left the process group, and a foreground sleep
    script = ("(setsid bash -c 'exec -a a2rl-test-daemon sleep 1000' &); echo started; "
              "exec -a a2rl-test-agent sleep 1000")


class Crashes(ScriptAgent):
    script = "echo 'something went wrong' >&2; exit 3"


class SnoopOptions(AgentOptions):
    """What `Snoops` tries to read (each passed to its script as a variable)."""

    SNOOP_DB: str = ""
    SNOOP_HOME_FILE: str = ""
    SNOOP_OTHER_RUN: str = ""


class Snoops(ScriptAgent):
    """Tries to read what an agent must never see; prints LEAK for anything it could."""

    options_model = SnoopOptions

    script = "\n".join([
        'for f in "$@"; do :; done',
        'for target in "$SNOOP_DB" "$SNOOP_HOME_FILE" "$SNOOP_OTHER_RUN"; do',
        '  if cat "$target" >/dev/null 2>&1; then echo "LEAK $target"; '
        'else echo "blocked $target"; fi',
        "done",
        'env | grep -q A2RL_TEST_SECRET && echo "LEAK env" || echo "blocked env"',
        'echo "home=$HOME"',
    ])

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        launch = super().prepare(ctx)
        launch.env.update({k: v for k, v in ctx.options.items() if k.startswith("SNOOP_")})
        return launch


class Spends(ScriptAgent):
    """Streams Claude Code's stream-json as the real CLI does while it works: an assistant
    message of 1,000 input and 50 output tokens every 0.2 s, and never stops by itself."""

    script = ("echo '{\"type\":\"system\",\"subtype\":\"init\"}'; i=0; while true; do i=$((i+1)); "
              "echo '{\"type\":\"assistant\",\"message\":{\"id\":\"m'$i'\",\"role\":"
              "\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"thinking\"}],"
              "\"usage\":{\"input_tokens\":1000,\"output_tokens\":50}}}'; sleep 0.2; done")

    def transcript_usage(self, data: bytes) -> Usage | None:
        return ClaudeCodeConnector().transcript_usage(data)


for cls in (NeverStops, Crashes, Snoops, Spends):
    AGENTS.register(f"test-{cls.__name__.lower()}", f"{__name__}:{cls.__name__}")
