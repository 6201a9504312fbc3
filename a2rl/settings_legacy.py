"""Deprecated settings of tasks' options: config.toml keys and `A2RL_<NAME>` variables from
before tasks had options, named by the tasks that own them, never by the settings.

A task's options declare their old names (`a2rl.tasks.options.TaskOptions.legacy_settings`),
registered when the class is made (`register_legacy_setting`); `load_settings` first has the
tasks' package import the declarations (`register_legacy_declarations`). Their values are kept
in `Settings.legacy_task_settings` and set the option when the task resolves its options.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Annotated, Any

from pydantic import TypeAdapter
from pydantic.fields import FieldInfo

#: old name -> the field of the option it sets, and the adapter checking a value as that option
#: checks it; registered by the tasks' option declarations
_LEGACY: dict[str, tuple[FieldInfo, TypeAdapter[Any]]] = {}
#: the settings' own names (`a2rl.settings` says them): no task may declare one as its own
_TAKEN: set[str] = set()


def take_names(names: Collection[str]) -> None:
    """Names that are settings, refused as a task's deprecated name."""
    _TAKEN.update(names)


def register_legacy_setting(name: str, field: FieldInfo) -> None:
    """Accept `name` (a config.toml key, an `A2RL_<NAME>` variable) as a deprecated setting
    holding a value of the option `field`. A task's options call this for each old name they
    declare, when their class is made."""
    if name in _TAKEN:
        raise ValueError(f"{name!r} is a setting; a task cannot declare it as its own")
    kind = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    _LEGACY[name] = (field, TypeAdapter(kind))


#: what declares more of those names when settings load (`a2rl.tasks` registers the import of
#: its built-in tasks' declarations): run then, not when the tasks are imported, so that
#: listing tasks imports none of them
_DECLARERS: list[Callable[[], object]] = []


def register_legacy_declarations(declare: Callable[[], object]) -> None:
    """Call `declare` whenever settings load (it registers names; calling it again is cheap)."""
    if declare not in _DECLARERS:
        _DECLARERS.append(declare)


def legacy_setting_names() -> list[str]:
    """The deprecated names the tasks imported so far have declared."""
    return sorted(_LEGACY)


def check_legacy_setting(name: str, value: Any) -> Any:
    """`value` as the option `name` sets checks it (a variable's "7" becomes 7); a
    `ValidationError` otherwise. A name no task has registered passes as it is."""
    return _LEGACY[name][1].validate_python(value) if name in _LEGACY else value


def task_key(task_id: str) -> str:
    """A task id as it appears in variable names: `A2RL_<KEY>_BASE_MODEL`, lower-cased."""
    return re.sub(r"[^a-z0-9]", "_", task_id.lower())


def task_pairs(raw: str) -> dict[str, str]:
    """`a=x,b=y` -> {"a": "x", "b": "y"}."""
    pairs = (p.split("=", 1) for p in raw.split(",") if "=" in p)
    return {task_key(k.strip()): v.strip() for k, v in pairs}
