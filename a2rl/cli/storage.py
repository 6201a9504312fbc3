"""Commands that move or clean the store's runs: `export` one (a2rl's archive, ATIF or an
Inspect log; a fleet's runs one file each), `import` an archive, and `gc` what finished runs
no longer need."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from a2rl.cli import context
from a2rl.cli.errors import fail, no_run
from a2rl.cli.options import JsonFlag, choices
from a2rl.cli.output import echo, print_json
from a2rl.settings import parse_duration


def export(
    run_id: Annotated[str | None, typer.Argument(help="a finished run")] = None,
    fmt: Annotated[choices("archive", "atif", "inspect"), typer.Option(
        "--format", help="archive (a2rl import reads it), atif (Harbor's trajectory format) "
        "or inspect (an Inspect AI eval log: inspect view opens it)")] = "archive",
    fleet: Annotated[str | None, typer.Option(
        help="every run of this fleet instead: one file each and index.json, in --out")] = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="the file (default a2rl-RUN.tar.gz, .trajectory.json or .eval here); "
        "with --fleet, the folder (default a2rl-fleet-FLEET)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write a finished run (or a fleet's runs) as a2rl's archive, ATIF or an Inspect log."""
    # a2rl.analysis: ~70 ms of every command's start-up (~95 ms with its export formats)
    from a2rl.analysis.export import ExportError, export_fleet, export_run

    if (run_id is None) == (fleet is None):
        fail("give a run id or --fleet FLEET (one of them)")
    settings = context.settings()
    store = context.read_store(settings)
    if store is None and fleet:
        fail(f"fleet {fleet!r} has no runs in this store")
    if store is None:
        no_run(str(run_id))
    try:
        result = (export_fleet(store, fleet, fmt, Path(out) if out else None) if fleet else
                  export_run(store, str(run_id), fmt, Path(out) if out else None))
    except KeyError:
        no_run(str(run_id))
    except (ExportError, OSError) as exc:
        fail(str(exc))
    if as_json:
        print_json(result.model_dump())
        return
    echo(result.line())


def import_(
    archive: Annotated[str, typer.Argument(help="an archive written by a2rl export")],
    as_json: JsonFlag = False,
) -> None:
    """Load a run archive into this installation's store (a run already present is skipped)."""
    from a2rl.analysis.archive import ArchiveError, import_run  # a2rl.analysis: see `export`

    settings = context.settings()
    if not Path(archive).is_file():
        fail(f"{archive}: no such file")
    try:
        result = import_run(context.store(settings), Path(archive))
    except ArchiveError as exc:
        fail(str(exc))
    if as_json:
        print_json(result.model_dump())
        return
    echo(f"run {result.run_id}: {result.detail}")


def gc(
    include_final: Annotated[bool, typer.Option(
        help="also remove the final checkpoint copies of finished runs")] = False,
    grace: Annotated[str, typer.Option(
        help="remove a run folder the store does not know (a failed create's) once it is "
             "this old and no live process is making it, e.g. 1h, 10m, 0")] = "1h",
    as_json: JsonFlag = False,
) -> None:
    """Remove what finished runs no longer need (checkpoint copies, sandbox leftovers) and
    run folders the store does not know."""
    # the server: the MCP SDK among its imports, ~0.4 s of every command's start-up
    from a2rl.server.gc import collect_garbage

    try:
        grace_s = 0.0 if grace.strip() in ("0", "0s") else parse_duration(grace)
    except ValueError as exc:
        fail(f"--grace: {exc}")
    settings = context.settings()
    store = context.read_store(settings)
    result = collect_garbage(settings, store, include_final=include_final, grace_s=grace_s) \
        if store is not None else {"removed": [], "bytes_freed": 0, "volumes_detached": []}
    if as_json:
        print_json(result)
        return
    freed = result["bytes_freed"]  # the blocks given back to the disk (server.gc)
    echo(f"removed {len(result['removed'])} items, {freed / 1e6:.1f} MB freed "
         f"({freed} bytes), "
         f"{len(result['volumes_detached'])} workspace volumes detached")
