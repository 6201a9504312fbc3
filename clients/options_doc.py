"""docs/agent-options.md, written from the connectors' option models: `python -m
a2rl.clients.options_doc > docs/agent-options.md` (a test holds the page equal to them). Apart
from `options`, which every connector imports, since it reads the agents' registry."""

from __future__ import annotations

from .options import AgentOptions
from .registry import BUILTIN_AGENTS, get_connector


def options_markdown(rows: list[tuple[str, str, type[AgentOptions]]]) -> str:
    """docs/agent-options.md: one table per agent (name, title, its options model)."""
    out = ["# Agent options", "",
           "What each agent takes with `--agent-option KEY=VALUE` (`a2rl run`, `a2rl fleet`; a",
           "fleet plan's `options`). Written from the connectors' option models",
           "(`clients/*.py`, `options_model`) by `python -m a2rl.clients.options_doc`; a test",
           "holds this page equal to them. An unknown key, or a value of the wrong type, is",
           "refused before the run is made, in one line naming the agent's options.", ""]
    for name, title, model in rows:
        out += [f"## `{name}`: {title}", ""]
        if model.__doc__ and model is not AgentOptions:
            out += [" ".join(model.__doc__.split()), ""]
        described = model.describe()
        if not described:
            out += ["No options.", ""]
            continue
        out += ["| option | type | default | what it does |", "|---|---|---|---|"]
        for r in described:
            default = "" if r["default"] in (None, "") else f"`{r['default']}`"
            out.append(f"| `{r['name']}` | {r['type']} | {default} | {r['description']} |")
        out.append("")
    return "\n".join(out)


def builtin_rows() -> list[tuple[str, str, type[AgentOptions]]]:
    """(name, title, options model) of every built-in agent, in the registry's order."""
    rows = []
    for name in BUILTIN_AGENTS:
        connector = get_connector(name)
        rows.append((name, connector.title, connector.options_model))
    return rows


if __name__ == "__main__":  # python -m a2rl.clients.options_doc > docs/agent-options.md
    print(options_markdown(builtin_rows()), end="")
