"""`a2rl config migrate`'s pure part: a config.toml's text with its deprecated flat names
(`docker_memory = "8g"`) moved into their sections (`[sandbox.docker] memory = "8g"`).

The file is rewritten from its parsed values (the standard library reads TOML but does not
write it, and a writer that keeps comments would be a dependency for one command): its
comments and layout are not kept, which is why the command keeps the old file beside it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any

from .settings_aliases import FLAT_ALIASES, put

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def migrated(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The TOML `text` with each flat name moved into its section, and the (old, new) names
    moved; a value given both ways keeps the section's. Settings under `[a2rl]` come out at
    the top. `tomllib.TOMLDecodeError` if `text` is not TOML."""
    data = tomllib.loads(text)
    table = data.get("a2rl", data)
    table = table if isinstance(table, dict) else {}
    out: dict[str, Any] = {k: v for k, v in table.items() if k not in FLAT_ALIASES}
    if table is not data:
        out |= {k: v for k, v in data.items() if k != "a2rl"}
    moved = []
    for key, value in table.items():
        if key in FLAT_ALIASES:
            put(out, FLAT_ALIASES[key], value, replace=False)
            moved.append((key, FLAT_ALIASES[key]))
    return dumps(out), moved


def dumps(data: Mapping[str, Any]) -> str:
    """TOML for a table of plain values (what config.toml holds): values first, then each
    sub-table as `[a.b]`."""
    lines: list[str] = []
    _table(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(lines: list[str], path: list[str], table: Mapping[str, Any]) -> None:
    values = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path and (values or not tables):
        lines += ["", f"[{'.'.join(_key(p) for p in path)}]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in values.items()]
    for key, sub in tables.items():
        _table(lines, [*path, key], sub)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if value == value and abs(value) != float("inf") else (
            "nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML's basic string's
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a TOML value: {value!r}")
