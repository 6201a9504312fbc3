"""Commands that move or clean the store's runs: `export` one to an archive, `import` one,
and `gc` what finished runs no longer need."""

from __future__ import annotations

from typing import Annotated

import typer

from a2rl.cli import context
from a2rl.cli.errors import fail, no_run
from a2rl.cli.options import JsonFlag
from a2rl.cli.output import print_json


def export(
    run_id: Annotated[str, typer.Argument(help="a finished run")],
    out: Annotated[str | None, typer.Option(
        "--out", help="archive path (default: a2rl-RUN.tar.gz here)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write one archive with a finished run's rows, blobs, report and a manifest of hashes."""
    from pathlib import Path

    from a2rl.analysis.archive import ArchiveError, export_run

    settings = context.settings()
    store = context.read_store(settings)
    if store is None:
        no_run(run_id)
    try:
        result = export_run(store, run_id, Path(out) if out else None)
    except KeyError:
        no_run(run_id)
    except (ArchiveError, OSError) as exc:
        fail(str(exc))
    if as_json:
        print_json(result.model_dump())
        return
    typer.echo(f"wrote {result.path} ({result.bytes} bytes: {result.counts['toolcall']} tool "
               f"calls, {result.counts['submission']} submissions, {result.counts['blob']} blobs)")


def import_(
    archive: Annotated[str, typer.Argument(help="an archive written by a2rl export")],
    as_json: JsonFlag = False,
) -> None:
    """Load a run archive into this installation's store (a run already present is skipped)."""
    from pathlib import Path

    from a2rl.analysis.archive import ArchiveError, import_run

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
    typer.echo(f"run {result.run_id}: {result.detail}")


def gc(
    include_final: Annotated[bool, typer.Option(
        help="also remove the final checkpoint copies of finished runs")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove what finished runs no longer need (checkpoint copies, sandbox leftovers)."""
    from a2rl.server.gc import collect_garbage

    settings = context.settings()
    store = context.read_store(settings)
    result = collect_garbage(settings, store, include_final=include_final) if store is not None \
        else {"removed": [], "bytes_freed": 0, "volumes_detached": []}  # no store: none known
    if as_json:
        print_json(result)
        return
    freed = result["bytes_freed"]  # the blocks given back to the disk (server.gc)
    typer.echo(f"removed {len(result['removed'])} items, {freed / 1e6:.1f} MB freed "
               f"({freed} bytes), "
               f"{len(result['volumes_detached'])} workspace volumes detached")
