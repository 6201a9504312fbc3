"""The check of the backends' and engines' own tables (`[sandbox.docker]`, `[grading.<engine>]`)
in loaded settings, against the sections their owners declare.

`load_settings` keeps those tables raw (`a2rl.sections.base.OwnerTables`): which owners exist is
the registries' to say, and they sit above the core. The command line, which knows them, calls
`check_owner_tables` for each such section at every command, so that a table naming no backend,
given to a backend with no settings, or holding a bad value is refused in one line naming where
it was set, as a bad value of any other setting is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .sections.base import Section, table_key
from .settings import Settings, SettingsError, Sources, allowed_message, origin, refuse_unknown_key


def _where(sources: Sources, path: str, value: Any) -> str:
    return origin(path, sources.get(path, "default"), value, sources.spelled.get(path))


def check_owner_tables(settings: Settings, sources: Sources, table: str, *, kind: str,
                       names: Sequence[str], section_of: Callable[[str], type[Section] | None]
                       ) -> None:
    """Refuse (`SettingsError`, one line) the first table of section `table` ("sandbox") that
    names none of `names` (the registered owners, a `kind` each: "sandbox backend"), whose
    owner declares no section (`section_of` of its name: None), or that its section refuses.
    `section_of` is called only for the tables given: an owner with none is never loaded."""
    owners = {table_key(name): name for name in names}
    for key, raw in getattr(settings, table).tables().items():
        given = [p for p in sources if p.startswith(f"{table}.{key}.")
                 and sources[p] != "default"]
        first = given[0] if given else f"{table}.{key}"
        where = _where(sources, first, raw.get(first.rpartition(".")[2]))
        name = owners.get(key)
        if name is None:
            *most, last = names
            known = f"{', '.join(map(repr, most))} or {last!r}" if most else repr(last)
            raise SettingsError(f"{where}: [{table}.{key}] is no {kind}'s table (use {known})")
        model = section_of(name)
        if model is None:
            raise SettingsError(f"{where}: {kind} {name!r} has no settings, so no "
                                f"[{table}.{key}] table")
        try:
            model.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            loc = [str(part) for part in error["loc"]]
            path = ".".join([table, key, *loc]) if loc else first
            source = sources.get(path, "default")
            if error["type"] == "extra_forbidden" and source.startswith("file:"):
                refuse_unknown_key(Path(source[5:]), [path])
            value = raw.get(loc[0]) if len(loc) == 1 else raw
            raise SettingsError(f"{_where(sources, path, value)}: {allowed_message(error, source)}"
                                ) from None
