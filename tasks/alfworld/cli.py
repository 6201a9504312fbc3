"""`a2rl alfworld ...`: the commands task alfworld declares (`tasks.registry.TASK_COMMANDS`).

The games are a download (the only part of the task that needs the network), so fetching them
is a command of the task's own, run once before the first run.
"""

from __future__ import annotations

from typing import Annotated

import typer

from a2rl.command import CommandError
from a2rl.settings import load_settings

app = typer.Typer(help="ALFWorld's game files (task alfworld).", no_args_is_help=True)


@app.command("download")
def download(
    force: Annotated[bool, typer.Option(help="download and unpack again")] = False,
) -> None:
    """Fetch ALFWorld's games once (needs the network) into alfworld_dir (default
    $A2RL_HOME/data/alfworld), then compute the task's expert demonstrations (cached)."""
    from .download import download as fetch
    from .download import target_dir
    from .task import demo_rows

    settings = load_settings()[0]
    typer.echo(f"ALFWorld games -> {target_dir(settings)}", err=True)
    try:
        folder = fetch(settings, force=force)
    except RuntimeError as exc:
        raise CommandError(str(exc), code=1) from None
    typer.echo("expert demonstrations (once, a few minutes)...", err=True)
    typer.echo(f"ALFWorld games in {folder}; {len(demo_rows(folder, settings))} demo steps")
