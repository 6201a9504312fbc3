"""`a2rl config show` (every setting by section, its value and where it came from, with every
registered backend's and engine's own section) and
`a2rl config migrate` (a config.toml's deprecated flat names moved into their sections)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from a2rl.cli import context
from a2rl.cli.errors import fail
from a2rl.cli.options import JsonFlag
from a2rl.cli.output import echo, print_json
from a2rl.grading.engine_select import ENGINES
from a2rl.sandbox.registry import BACKENDS
from a2rl.sections.base import OwnerTables, owner_section
from a2rl.settings import Settings, SettingsError, field_at, load_settings, setting_paths
from a2rl.settings_migrate import migrated


def _value(settings: Settings, path: str) -> Any:
    """The value at a dotted path; in a backend's or engine's table, as its section reads it."""
    value: Any = settings
    parts = path.split(".")
    for i, part in enumerate(parts):
        if isinstance(value, OwnerTables) and part not in type(value).model_fields:
            owned = owner_section(parts[i - 1], part)
            value = value.section(owned) if owned is not None else value.tables()[part]
        else:
            value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def _declare_owners() -> None:
    """Load every backend and engine, so that their sections are declared and listed; one
    that cannot be loaded is said in a line on stderr, the others still listed."""
    for registry in (BACKENDS, ENGINES):
        for message in registry.load_all()[1].values():
            echo(f"warning: {message}", err=True)


def _field(path: str) -> str:
    return field_at(path).description or ""


def config_show(as_json: JsonFlag = False) -> None:
    """Show every setting by section, its value and where it came from (default, file, env,
    cli)."""
    settings, sources = context.settings_and_sources()
    _declare_owners()
    rows: dict[str, tuple[Any, str]] = {}
    for path in sorted(setting_paths(), key=lambda p: "." in p):  # the top's first
        value = settings.database_url if path == "db_url" else _value(settings, path)
        if isinstance(value, dict):
            value = {k: v.model_dump() if isinstance(v, BaseModel) else v
                     for k, v in value.items()}
        rows[path] = (value, sources.get(path, "default"))
    if as_json:
        doc: dict[str, Any] = {}
        for path, (value, source) in rows.items():
            *tables, key = path.split(".")
            table = doc
            for name in tables:
                table = table.setdefault(name, {})
            table[key] = {"value": value, "source": source}
        print_json(doc)
        return
    section = ""
    for path, (value, source) in rows.items():
        table, _, key = path.rpartition(".")
        if table != section:
            section = table
            echo(f"\n[{table}]")
        echo(f"{key:28} = {value!s:40} [{source}]  # {_field(path)}")


def config_migrate() -> None:
    """Move config.toml's deprecated flat settings (docker_memory = ...) into their sections
    ([sandbox.docker] memory = ...), keeping the old file as config.toml.bak."""
    home = Path(os.environ.get("A2RL_HOME") or "~/.a2rl").expanduser()
    path = home / "config.toml"
    if not path.is_file():
        fail(f"{path}: no such file, nothing to migrate")
    environ = {"A2RL_HOME": str(home)}  # the file alone: a variable's error is not the file's
    try:
        before = load_settings(environ=environ, warn=False)[0]
        text, moved = migrated(path.read_text())
    except (SettingsError, OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        fail(f"not migrated: {exc}")
    if not moved:
        echo(f"{path}: already in sections, nothing to migrate")
        return
    backup = path.with_name(path.name + ".bak")
    n = 1
    while backup.exists():
        backup, n = path.with_name(f"{path.name}.bak.{n}"), n + 1
    backup.write_bytes(path.read_bytes())
    fresh = path.with_name(f".{path.name}.new")
    fresh.write_text(text)
    os.replace(fresh, path)
    why = "values differ"
    try:
        after: Settings | None = load_settings(environ=environ, warn=False)[0]
    except SettingsError as exc:
        after, why = None, str(exc)
    if after is None or after.model_dump() != before.model_dump():
        os.replace(backup, path)  # never leave a file that means something else
        fail(f"not migrated: the rewritten file would not load the same settings "
             f"({why}); {path} is unchanged")
    echo(f"{path}: moved {', '.join(f'{old} to {new}' for old, new in moved)} "
         f"(the old file is {backup.name}; comments were not kept)")
