"""What a command opens: its settings, the store, and progress lines on stderr.

Commands that make runs create the store on first use (`store`); commands that only look
never create one (`read_store`), so `a2rl show r-typo` on a fresh installation leaves it
empty. Either way, this machine's overdue runs are finalized first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import a2rl.tasks  # noqa: F401  (its tasks declare their deprecated settings' names)
from a2rl.cli.errors import fail, say_error
from a2rl.cli.output import echo
from a2rl.grading.engine_select import ENGINES, engine_section
from a2rl.registry import RegistryError
from a2rl.sandbox.registry import BACKENDS, backend_section
from a2rl.settings import Settings, SettingsError, Sources, load_settings, origin
from a2rl.settings_aliases import warn_deprecated
from a2rl.settings_owners import check_owner_tables
from a2rl.store import Store, StoreMissing
from a2rl.store.owners import overdue_runs

_quiet = False  # --quiet: no progress lines


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def settings(overrides: Mapping[str, Any] | None = None) -> Settings:
    """The settings, the command line's `overrides` by dotted path (`{"sandbox.backend": x}`)."""
    return settings_and_sources(overrides)[0]


def settings_and_sources(overrides: Mapping[str, Any] | None = None) -> tuple[Settings, Sources]:
    """The settings and where each came from, refused in one line when any is bad."""
    try:
        loaded, sources = load_settings(overrides, warn=False)
    except SettingsError as exc:  # a broken config file or variable: say which, don't trace
        fail(str(exc))
    # the settings take any name for these two; which exist is the registries' to say (a
    # package may add some), so every command refuses an unknown one as it would a bad value
    for name, value, known in (
            ("sandbox.backend", loaded.sandbox.backend, BACKENDS.names()),
            ("grading.engine", loaded.grading.engine, ["auto", *ENGINES.names()])):
        if value not in known:
            *first, last = known
            where = origin(name, sources[name], value, sources.spelled.get(name))
            fail(f"{where}: unknown, use "
                 f"{', '.join(map(repr, first))} or {last!r}")
    # each backend's and engine's table ([sandbox.docker]) against the section its owner
    # declares; only the owners given a table are loaded
    try:
        for table, registry, section_of in (("sandbox", BACKENDS, backend_section),
                                            ("grading", ENGINES, engine_section)):
            check_owner_tables(loaded, sources, table, kind=registry.kind,
                               names=registry.names(), section_of=section_of)
    except (SettingsError, RegistryError) as exc:
        fail(str(exc))
    warn_deprecated(sources.renames)  # once they are found good: an error is one line
    return loaded, sources


def store(settings: Settings) -> Store:
    """The store, created on first use (commands that make runs)."""
    settings.home_dir.mkdir(parents=True, exist_ok=True)
    return _finalize_overdue(settings, Store(settings.database_url))


def read_store(settings: Settings) -> Store | None:
    """The store for a command that only looks: None when none exists yet, and none is made
    (`a2rl show r-typo` on a fresh installation leaves it empty)."""
    try:
        return _finalize_overdue(settings, Store(settings.database_url, create=False))
    except StoreMissing:
        return None


def _finalize_overdue(settings: Settings, store: Store) -> Store:
    """Any command that opens the store first finalizes this machine's runs that are past
    their deadline with no live process holding them (`a2rl.server.run.owner`); said on
    stderr, so `--json` output stays one document."""
    if overdue_runs(settings.runs_dir, store):
        # the server only when a run is due: with the MCP SDK it is ~0.4 s of start-up
        from a2rl.server.run.owner import finalize_overdue

        finalize_overdue(settings, store, say=lambda m: None if _quiet else say_error(m))
    return store


def progress() -> Any:
    """Progress lines on stderr, stamped with the seconds since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        if not _quiet:
            echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    return say


def quiet() -> bool:
    return _quiet
