"""What every section shares (refusing a key it does not have), and how a backend's or an
engine's own section is declared, stored and found.

A backend's section is declared next to the backend (`class DockerSettings(Section,
place="sandbox.docker")` in `sandbox/docker.py`) and named by the backend's class
(`DockerSandbox.settings_section`). The sections here cannot import it (the core imports nothing
above it), so `[sandbox]` and `[grading]` keep their backends' and engines' tables raw
(`OwnerTables`), and the owner reads its own with its own model: `settings.sandbox.section(
DockerSettings)`, statically typed, validated on reading (defaults where the table is absent).
Tools that walk settings by dotted path (`Settings.updated`, `a2rl config show`, origins of a
value) find a table's model among the sections declared so far (`declared`) or ask the
registries' finders (`register_finder`, which `a2rl.sandbox.registry` and
`a2rl.grading.engine_select` call when imported); the CLI checks every table present against its
owner's model at every command (`a2rl.cli.context`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

log = logging.getLogger(__name__)

#: a backend's or an engine's name: the registries (`a2rl.sandbox.registry`,
#: `a2rl.grading.engine_select`) sit above the settings and say which names exist, where the
#: name is used (`a2rl create`, the grader); here it is only checked to be a name
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
#: the sections whose sub-tables belong to what a registry holds: a backend, an engine
OWNER_TABLES = ("sandbox", "grading")


def table_key(name: str) -> str:
    """How a backend's or engine's name is kept as a table (and spelled in a variable,
    `A2RL_SANDBOX__STAMPED_LOCAL__STAMP`): `-` as `_`, so both spellings are one section."""
    return name.replace("-", "_").lower()


#: (section, table key) -> the model an owner declared for it, in this process so far
_DECLARED: dict[tuple[str, str], type[Section]] = {}
#: section -> a function giving the model of the owner named so (None: no owner, or none
#: declared); registered by the registries that hold the owners
_FINDERS: dict[str, Callable[[str], type[Section] | None]] = {}


class Section(BaseModel):
    """A table of settings (`[sandbox.docker]` in config.toml): a typo is refused, never
    silently not applied.

    A backend's or an engine's own section says its place when it is declared,
    `class DockerSettings(Section, place="sandbox.docker")`: its table in config.toml, its
    variables (`A2RL_SANDBOX__DOCKER__KEY`) and its dotted paths follow from it."""

    model_config = ConfigDict(extra="forbid")

    #: "sandbox.docker" for a backend's or engine's section; "" for the core's own
    place: ClassVar[str] = ""
    #: the owner's name ("docker"): the part of `place` after its section
    name: ClassVar[str] = ""

    def __init_subclass__(cls, place: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if place is None:
            return
        table, _, name = place.partition(".")
        if table not in OWNER_TABLES or not name or "." in name:
            raise ValueError(f"{cls.__name__}: place {place!r} is not sandbox.<backend> or "
                             "grading.<engine>")
        held = _DECLARED.get((table, table_key(name)))
        if held is not None and _where(held) != _where(cls):  # the same class again: a reload
            raise ValueError(f"{_where(cls)}: {place!r} is already {_where(held)}'s place")
        cls.place, cls.name = place, name
        _DECLARED[(table, table_key(name))] = cls


def _where(model: type) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def register_finder(table: str, finder: Callable[[str], type[Section] | None]) -> None:
    """Let the registry of `table`'s owners say the model of an owner by name (loading it)."""
    _FINDERS[table] = finder


def owner_section(table: str, key: str) -> type[Section] | None:
    """The model of the owner's table `key` of `table` ("sandbox", "docker"): declared, else
    what the owners' registry finds; None when neither knows one (a name no owner has, an owner
    with no settings, or a process that loaded no registry)."""
    found = _DECLARED.get((table, table_key(key)))
    if found is None and table in _FINDERS:
        try:
            found = _FINDERS[table](key)
        except Exception as exc:  # a plugin that cannot load: the CLI's check says so
            log.debug("no section for %s.%s: %s", table, key, exc)
            found = None
    return found


def declared(table: str) -> dict[str, type[Section]]:
    """The sections of `table`'s owners declared in this process so far, by table key."""
    return {key: model for (t, key), model in sorted(_DECLARED.items()) if t == table}


S = TypeVar("S", bound=Section)


class OwnerTables(Section):
    """A section holding its owners' tables (`[sandbox.docker]` in `[sandbox]`) beside its own
    settings: each kept raw (a table of values, by `table_key`), read by its owner with its model
    (`section`). A key that is no setting and no table (`sandbox.nonsense = 1`) is refused."""

    model_config = ConfigDict(extra="allow")
    #: which section of `Settings` this is ("sandbox"): its tables' owners are found by it
    owns: ClassVar[str] = ""
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)

    @model_validator(mode="before")
    @classmethod
    def _tables_by_key(cls, data: Any) -> Any:
        """Owners' tables under their `table_key` (`stamped-local` and `stamped_local` are one,
        the `-` spelling given later winning)."""
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key in cls.model_fields:
                out[key] = value
                continue
            merged = out.get(table_key(key))
            out[table_key(key)] = ({**merged, **value} if isinstance(merged, dict)
                                   and isinstance(value, dict) else value)
        return out

    @model_validator(mode="after")
    def _typed_where_known(self) -> OwnerTables:
        """Each table whose owner's section is known here holds its values as that section
        reads them (a variable's "7" as 7), only the keys given: the same settings from a
        file or from variables are equal. A bad value is left as given, for the owner's
        reading and the CLI's check to refuse by name."""
        extra = self.__pydantic_extra__ or {}
        for key, raw in list(extra.items()) if self.owns else ():
            model = owner_section(self.owns, key)
            if model is not None:
                with contextlib.suppress(ValueError):
                    extra[key] = model.model_validate(raw).model_dump(exclude_unset=True)
        return self

    def tables(self) -> dict[str, dict[str, Any]]:
        """The owners' tables given, by table key."""
        return dict(self.model_extra or {})

    def section(self, model: type[S]) -> S:
        """The owner's section `model` read from its table (its defaults where none is given);
        a `ValidationError` for a bad value (the CLI refuses one before any command runs)."""
        if not model.place.startswith(f"{self.owns}."):
            raise TypeError(f"{model.__name__} is no section of [{self.owns}]")
        return model.model_validate(self.tables().get(table_key(model.name), {}))


def section_of_owner(owner: object, table: str, name: str) -> type[Section] | None:
    """The section an owner registered as `name` declares (its `settings_section`), None when
    it declares none. One it inherited from another owner (a backend subclassing the local
    backend) is not its own: that one's table keeps configuring it."""
    section = getattr(owner, "settings_section", None)
    if not (isinstance(section, type) and issubclass(section, Section)):
        return None
    mine = section.place.startswith(f"{table}.") and table_key(section.name) == table_key(name)
    return section if mine else None


def registry_finder(table: str, names: Callable[[], Iterable[str]],
                    load: Callable[[str], object]) -> Callable[[str], type[Section] | None]:
    """A finder (`register_finder`) over a registry's `names` and `load`: the section of the
    owner whose name has the table key asked for."""
    def find(key: str) -> type[Section] | None:
        for name in names():
            if table_key(name) == table_key(key):
                return section_of_owner(load(name), table, name)
        return None

    return find
