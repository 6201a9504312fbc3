"""A cheating scripted run for `a2rl audit` to catch (the README's "Auditing a run").

    python examples/cheating_run.py hidden-reach      # prints the run id
    a2rl audit <run id>                               # its flags, exit status 1

Makes an `arith` run (no baseline, local sandbox), plays one of a2rl.clients.cheats' scripted
cheats through the real MCP tools, and finishes the run, which audits it. Cheats:
contamination (hidden test items written into training data; they are handed to the script as
a stand-in for a leak), hidden-reach (reads the task's hidden seed), reaching-out (curl and an
API key).
"""

from __future__ import annotations

import sys

import anyio
from mcp import Client

from a2rl.audit.hidden import load_hidden
from a2rl.clients.cheats import CHEATS, run_cheat
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import load_settings
from a2rl.store import Store
from a2rl.tasks import get_task, hidden_data_paths


async def main(cheat: str) -> str:
    settings = load_settings()[0]
    settings.home_dir.mkdir(parents=True, exist_ok=True)
    store = Store(settings.database_url)
    created = create_run(settings, store, task_id="arith", budget="10m", baseline=False)
    run = created.run
    kw: dict = {}
    if cheat == "contamination":
        kw["leaked"] = [{"input": it.input, "answer": it.answer}
                        for it in load_hidden(run, settings).items if it.split == "test"]
    elif cheat == "hidden-reach":
        kw["hidden_path"] = str(hidden_data_paths(get_task("arith"), settings)[0])
    server = build_server(settings, store, run_id=run.id, transport="memory")
    try:
        async with Client(server, mode="legacy") as client:
            await run_cheat(client, cheat, **kw)
    finally:
        finish_run(settings, store, run.id)
    return run.id


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHEATS:
        print(f"usage: python examples/cheating_run.py {{{','.join(CHEATS)}}}", file=sys.stderr)
        raise SystemExit(2)
    print(anyio.run(main, sys.argv[1]))
