"""One registry mechanism for everything a2rl looks up by name: tasks, agents, sandbox backends
and grading engines.

Why one mechanism: each of these was found a different way (a dict of factories filled at import
time, dotted paths returning `Any`, an if/elif), so adding one meant learning three styles and
editing a2rl. A `Registry[T]` maps a name to a *target*: either an object already in hand (a
class, a factory) or a `"module:attr"` string imported only when the name is first used, so
listing names never imports a task's data code or an agent's SDK.

A registry may also read a Python entry-point group (`a2rl.tasks`, `a2rl.agents`): an installed
package declares

    [project.entry-points."a2rl.tasks"]
    mytask = "my_pkg.task:MyTask"

and the name appears beside the built-ins without touching a2rl. Entry points are read from the
installed distributions' metadata (no import) when names are first needed. Names registered in
code win over an entry point of the same name, so a plugin cannot silently replace a built-in.

A target that fails to import is reported when it is used, as one line naming the plugin, its
target and the error (`PluginLoadError`); it never breaks listing the others (`load_all`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

#: What a name resolves to once loaded: something that, called, builds a `T` (a class or a
#: factory function), or a ready object for registries of plain values.
Target = Callable[..., T]


class RegistryError(KeyError):
    """A name the registry cannot give. A `KeyError`, so callers that caught the old lookups'
    `KeyError` keep working; `str()` is the message as written (KeyError's adds quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownName(RegistryError):
    """No registration and no entry point under this name."""


class PluginLoadError(RegistryError):
    """The name is registered but its target could not be imported or is not what it says."""


@dataclass(frozen=True)
class Registration:
    """One registration: where the target comes from, for messages and `a2rl tasks`."""

    name: str
    target: str | object  # "module:attr", or the object itself
    source: str  # "builtin", "code" or "entry point <dist>"


def resolve_target(spec: str) -> object:
    """Import `"module:attr"` (attr may be dotted)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"target {spec!r} is not 'module:attr'")
    obj: object = import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Registry(Generic[T]):
    """Names to lazily loaded targets of one kind.

    `kind` names the thing in messages ("task", "agent"); `group` is the entry-point group read
    for plugins (None: code registrations only); `check` validates a loaded target (e.g. that it
    is a `Task` subclass) so a wrong entry point fails as a clear `PluginLoadError`.
    """

    def __init__(self, kind: str, *, plural: str | None = None, group: str | None = None,
                 check: Callable[[object], bool] | None = None) -> None:
        self.kind, self.plural, self.group = kind, plural or f"{kind}s", group
        self._check = check
        self._entries: dict[str, Registration] = {}
        self._plugins: dict[str, Registration] | None = None  # read from metadata on first need
        self._loaded: dict[str, Target[T]] = {}
        self._lock = threading.RLock()

    # --- registering ----------------------------------------------------------------------
    def register(self, name: str, target: str | Target[T], *, source: str = "code") -> None:
        """Add `name`; a later registration under the same name replaces the earlier one."""
        with self._lock:
            self._entries[name] = Registration(name, target, source)
            self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)
            self._loaded.pop(name, None)

    def _plugin_entries(self) -> dict[str, Registration]:
        if self.group is None:
            return {}
        if self._plugins is None:
            found: dict[str, Registration] = {}
            try:
                eps = entry_points(group=self.group)
            except Exception as exc:  # broken metadata must not break the built-ins
                log.warning("cannot read entry points %s: %s", self.group, _one_line(exc))
                eps = ()  # type: ignore[assignment]
            for ep in eps:
                dist = getattr(ep.dist, "name", None) or "unknown distribution"
                found.setdefault(ep.name, Registration(ep.name, ep.value,
                                                       f"entry point of {dist}"))
            self._plugins = found
        return self._plugins

    def refresh(self) -> None:
        """Forget what was read from entry points (after installing a package in-process)."""
        with self._lock:
            for name in self._plugins or {}:
                if name not in self._entries:
                    self._loaded.pop(name, None)
            self._plugins = None

    # --- looking up -----------------------------------------------------------------------
    def entries(self) -> dict[str, Registration]:
        """Every registration by name, imports nothing: code registrations in the order they
        were made, then entry points (sorted) whose names code did not take."""
        with self._lock:
            plugins = self._plugin_entries()
            return {**self._entries, **{n: plugins[n] for n in sorted(plugins)
                                        if n not in self._entries}}

    def names(self) -> list[str]:
        """The known names (in `entries` order), without importing any target."""
        return list(self.entries())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.entries()

    def entry(self, name: str) -> Registration:
        entry = self.entries().get(name)
        if entry is None:
            known = ", ".join(sorted(self.names())) or "none"
            raise UnknownName(f"unknown {self.kind} {name!r}; known {self.plural}: {known}")
        return entry

    def load(self, name: str) -> Target[T]:
        """The target of `name`, imported on first use (`UnknownName`, `PluginLoadError`)."""
        with self._lock:
            if name in self._loaded:
                return self._loaded[name]
            entry = self.entry(name)
            where = entry.target if isinstance(entry.target, str) else repr(entry.target)
            try:
                target = (resolve_target(entry.target) if isinstance(entry.target, str)
                          else entry.target)
            except Exception as exc:  # ImportError, AttributeError, or the module's own error
                raise PluginLoadError(
                    f"{self.kind} {name!r} ({entry.source}, {where}) cannot be loaded: "
                    f"{_one_line(exc)}") from exc
            if self._check is not None and not self._check(target):
                raise PluginLoadError(f"{self.kind} {name!r} ({entry.source}, {where}) is not "
                                      f"a valid {self.kind}")
            self._loaded[name] = target  # type: ignore[assignment]
            return target  # type: ignore[return-value]

    def create(self, name: str, *args: object, **kwargs: object) -> T:
        """Load `name` and call it; an error raised while building is the target's own."""
        return self.load(name)(*args, **kwargs)

    def load_all(self) -> tuple[dict[str, Target[T]], dict[str, str]]:
        """(loaded targets, one-line errors) for every name: a broken plugin is reported in the
        second mapping, never raised, so listing the others still works."""
        loaded: dict[str, Target[T]] = {}
        errors: dict[str, str] = {}
        for name in self.names():
            try:
                loaded[name] = self.load(name)
            except RegistryError as exc:
                errors[name] = str(exc)
        return loaded, errors
