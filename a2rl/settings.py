"""Settings: command line over environment over `$A2RL_HOME/config.toml` over defaults.

One resolved `Settings` object is passed down explicitly; nothing reads the environment on its
own, so that a test (or a second server in one process) can hold different settings: building
`Settings(...)` takes its arguments and the defaults only. `load_settings` adds the sources,
pydantic-settings' own: the environment (`A2RL_` prefix, `__` between a section and its key:
`A2RL_SANDBOX__DOCKER__MEMORY`) and the TOML file (`[sandbox.docker] memory = "16g"`), behind
the command line's values, and says where each value came from (`a2rl config show`).

Settings are sections, each owned by the code it configures (`a2rl.sections` says where each
is declared); a few installation-wide values stay at the top (home, the store, the default
budget and base model, the tasks' tables). The flat names from before sections
(`docker_memory`, `A2RL_DOCKER_MEMORY`) still load, as deprecated aliases
(`a2rl.settings_aliases`), with one line on stderr naming their new place.

Deprecated settings of tasks' options are named by the tasks that own them, never here
(`a2rl.settings_legacy`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, get_origin

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from .sections import (
    GradingSettings,
    JudgeSettings,
    ModelPrice,
    NarrativeSettings,
    RecordingSettings,
    SandboxSettings,
    ServerSettings,
)
from .sections.base import OWNER_TABLES, OwnerTables, Section, declared, owner_section, table_key
from .settings_aliases import FLAT_ALIASES, env_name, put, toml_place, warn_deprecated
from .settings_legacy import (
    _DECLARERS,
    _LEGACY,
    check_legacy_setting,
    legacy_setting_names,
    register_legacy_declarations,
    register_legacy_setting,
    take_names,
    task_key,
    task_pairs,
)
from .units import parse_duration, parse_size

__all__ = ["ENV_PREFIX", "ModelPrice", "Settings", "SettingsError", "Sources",
           "check_legacy_setting", "legacy_setting_names", "load_settings", "origin",
           "parse_duration", "parse_size", "register_legacy_declarations",
           "register_legacy_setting", "task_key"]

ENV_PREFIX = "A2RL_"
_TASK_MODEL_VAR = re.compile(r"^A2RL_(\w+?)_BASE_MODEL$")
#: settings that are tables, never variables: set in config.toml (and `-T`)
_NOT_VARIABLES = ("tasks", "legacy_task_settings")


class Settings(BaseSettings):
    """Every knob of an installation, in sections. Field descriptions are shown by
    `a2rl config show`."""

    home: Path = Field(Path("~/.a2rl"), description="where runs, secrets and the store live")
    db_url: str = Field("", description="SQLAlchemy URL of the store; default SQLite in home")
    default_budget: str = Field("2h", description="budget when neither flag nor task gives one")
    base_model: str = Field("", description="base model of every task (hub id, folder or "
                            "tiny-llama); empty: each task's own default")
    tasks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="each task's options, from the [tasks.<id>] tables "
        "of config.toml (`a2rl tasks <id>` lists them; -T key=value overrides)")
    # Deprecated: the options' older global forms. New task options are never added here.
    task_base_models: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="deprecated: -T base_model= / [tasks.<id>] "
        "base_model. Base model per task (env: A2RL_<TASK>_BASE_MODEL, or "
        "A2RL_TASK_BASE_MODELS=task=model,task=model)")
    legacy_task_settings: dict[str, Any] = Field(
        default_factory=dict, description="deprecated: the global settings tasks' options had "
        "before [tasks.<id>] (`a2rl tasks <id>` names each beside its option), as config.toml "
        "keys or A2RL_<NAME> variables; each still sets its option, under [tasks.<id>] and -T")
    server: ServerSettings = Field(default_factory=ServerSettings)
    recording: RecordingSettings = Field(default_factory=RecordingSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    grading: GradingSettings = Field(default_factory=GradingSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    narrative: NarrativeSettings = Field(default_factory=NarrativeSettings)
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="USD per million tokens of each driver model, for "
        "the cost ledger where the agent reports no cost and for --max-cost: a "
        "[prices.\"NAME\"] table of config.toml with input, output and cached_input, or "
        "A2RL_PRICES as JSON; the model named as --model names it (or the part after its "
        "last /). Empty: such costs are unknown")

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True,
                                      env_nested_delimiter="__", extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        **_: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`Settings(...)` reads no variable and no file: `load_settings` adds them."""
        return (init_settings,)

    @field_validator("task_base_models", mode="before")
    @classmethod
    def _task_pairs(cls, value: Any) -> Any:
        """A variable holds `task=model,task=model`."""
        return task_pairs(value) if isinstance(value, str) else value

    @field_validator("task_base_models")
    @classmethod
    def _task_keys(cls, value: dict[str, str]) -> dict[str, str]:
        return {task_key(k): v for k, v in value.items()}

    @field_validator("legacy_task_settings")
    @classmethod
    def _legacy_values(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Each value checked as its option checks it (names no task has registered in this
        process pass as they are: a grading worker rebuilds settings before loading tasks)."""
        try:
            return {name: check_legacy_setting(name, v) for name, v in value.items()}
        except ValidationError as exc:
            raise ValueError(allowed_message(exc.errors(include_url=False)[0])) from None

    def updated(self, changes: Mapping[str, Any]) -> Settings:
        """A copy with `changes` ({"sandbox.docker.memory": "1g"}: dotted paths) applied and
        checked as loading would check them; a path that is no setting is a `KeyError`."""
        data = self.model_dump()
        owners: dict[tuple[str, str], type[Section]] = {}
        for path, value in changes.items():
            path = canonical(path)
            field_at(path)
            put(data, path, value)
            parts = path.split(".")
            if len(parts) > 2 and parts[0] in OWNER_TABLES \
                    and (model := owner_section(parts[0], parts[1])):
                owners[parts[0], parts[1]] = model
        for (table, key), model in owners.items():  # an owner's table is raw: check it here
            model.model_validate(data[table][key])
        return type(self)(**data)

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Settings:
        """pydantic's copy, refusing an update that names no field (a flat name from before
        sections would otherwise be set as an attribute nothing reads)."""
        unknown = set(update or {}) - set(type(self).model_fields)
        if unknown:
            raise KeyError(f"not settings: {sorted(unknown)} (use Settings.updated with "
                           "dotted paths)")
        return super().model_copy(update=update, deep=deep)

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.home_dir / 'a2rl.db'}"

    @property
    def runs_dir(self) -> Path:
        return self.home_dir / "runs"


def _section_of(field: FieldInfo) -> type[Section] | None:
    kind = field.annotation
    return kind if isinstance(kind, type) and issubclass(kind, Section) else None


def canonical(path: str) -> str:
    """A dotted path with an owner's table by its key: `sandbox.stamped-local.stamp` ->
    `sandbox.stamped_local.stamp` (both spellings name one section)."""
    parts = path.split(".")
    if len(parts) > 2 and parts[0] in OWNER_TABLES:
        parts[1] = table_key(parts[1])
    return ".".join(parts)


def _sub_section(model: type[BaseModel], name: str, table: str) -> type[Section] | None:
    """The section at `name` of `model` (itself at `table`): a field's, or an owner's table's
    (loaded through its registry when not declared yet)."""
    if name in model.model_fields:
        return _section_of(model.model_fields[name])
    if issubclass(model, OwnerTables):
        return owner_section(table, name)
    return None


def field_at(path: str) -> FieldInfo:
    """The field of a dotted setting (`sandbox.docker.memory`); `KeyError` if there is none.
    A backend's or engine's key is found in the section its owner declares, loading the owner
    when its registry is loaded and this process has not declared it yet."""
    model: type[BaseModel] = Settings
    *tables, key = canonical(path).split(".")
    for i, table in enumerate(tables):
        section = _sub_section(model, table, tables[i - 1] if i else "")
        if section is None:
            raise KeyError(path)
        model = section
    if key not in model.model_fields:
        raise KeyError(path)
    return model.model_fields[key]


def setting_paths(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[str]:
    """Every setting's dotted path, sections walked, in declaration order; the backends' and
    engines' sections that this process has declared after their section's own settings."""
    for name, field in model.model_fields.items():
        section = _section_of(field)
        if section is None:
            yield prefix + name
        else:
            yield from setting_paths(section, f"{prefix}{name}.")
    if issubclass(model, OwnerTables):
        for key, owned in declared(prefix.rstrip(".")).items():
            yield from setting_paths(owned, f"{prefix}{key}.")


def leaves(data: Mapping[str, Any], model: type[BaseModel] = Settings,
           prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of a source's nested values: into the sections and the owners'
    tables (each key of one a leaf), a key that is no section's (a typo, a dict setting) as one
    leaf."""
    for name, value in data.items():
        field = model.model_fields.get(name)
        section = _section_of(field) if field is not None else None
        if section is not None and isinstance(value, Mapping):
            yield from leaves(value, section, f"{prefix}{name}.")
        elif field is None and issubclass(model, OwnerTables) and isinstance(value, Mapping):
            yield from ((f"{prefix}{table_key(name)}.{k}", v) for k, v in value.items())
        else:
            yield prefix + name, value


class SettingsError(ValueError):
    """A setting with a bad value; the message names where it came from and what is allowed."""


take_names([*Settings.model_fields, *FLAT_ALIASES])


# --- sources ----------------------------------------------------------------------------------

class _Spelled:
    """What a source read under another spelling than the dotted path (a deprecated flat
    name), for its messages, and the renames to warn about."""

    def __init__(self) -> None:
        self.spelled: dict[str, str] = {}
        self.renames: list[tuple[str, str]] = []


class _Environment(EnvSettingsSource, _Spelled):
    """pydantic-settings' environment source over the mapping given (the process's by
    default), sections as `A2RL_SECTION__KEY`, plus what is no field: the per-task base model
    variables (`A2RL_<TASK>_BASE_MODEL`), the deprecated names tasks declare (`A2RL_<NAME>`)
    and the deprecated flat names of settings now in sections (`A2RL_DOCKER_MEMORY`)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        _Spelled.__init__(self)
        self.environ = environ
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # a section is its keys' variables only, never one variable of JSON: `A2RL_SANDBOX` is
        # also the run's nonce in every job's environment (`a2rl.sandbox.local.SANDBOX_VAR`)
        whole = {f"{ENV_PREFIX}{name}".lower() for name, field in Settings.model_fields.items()
                 if _section_of(field) is not None}
        return {k.lower(): v for k, v in self.environ.items()
                if v != "" and k.lower() not in whole}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name in _NOT_VARIABLES:
            return None, field_name, False
        return super().get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        per_task = {task_key(m.group(1)): v for k, v in self.environ.items()
                    if (m := _TASK_MODEL_VAR.match(k)) and v}
        if per_task:
            listed = data.get("task_base_models", {})
            data["task_base_models"] = {**(task_pairs(listed) if isinstance(listed, str)
                                           else listed), **per_task}
        legacy = {name: value for name in _LEGACY
                  if (value := self.env_vars.get(f"{ENV_PREFIX}{name}".lower()))}
        if legacy:
            data["legacy_task_settings"] = legacy
        for flat, path in FLAT_ALIASES.items():
            value = self.env_vars.get(f"{ENV_PREFIX}{flat}".lower())
            if value:
                old = f"{ENV_PREFIX}{flat.upper()}"
                put(data, path, _decoded(path, value), replace=False)
                self.spelled.setdefault(path, old)
                self.renames.append((old, env_name(path)))
        return data


def _decoded(path: str, value: str) -> Any:
    """A variable's text for a table setting (`A2RL_MODEL_PRICES`) read as JSON, as
    pydantic-settings reads the new name's; a list is comma-separated (its own validator)."""
    try:
        kind = field_at(path).annotation
    except KeyError:  # an owner's section no registry here knows: checked where it is
        return value
    if get_origin(kind) is dict:
        try:
            return json.loads(value)
        except ValueError:
            return value  # validation says what is allowed
    return value


class _ConfigFile(PydanticBaseSettingsSource, _Spelled):
    """config.toml: settings at the top or under `[a2rl]`, sections as tables
    (`[sandbox.docker]`), tasks' tables under `[tasks.<id>]` (top-level even beside an `[a2rl]`
    table), a task's deprecated name into `legacy_task_settings`, a deprecated flat name into
    its section. A key that is none of these (a typo such as `[sandbox] memroy`) would
    otherwise be silently not applied: it is refused by name."""

    def __init__(self, path: Path) -> None:
        _Spelled.__init__(self)
        super().__init__(Settings)
        self.path = path
        self.values = self._read() if path.is_file() else {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.values

    def _read(self) -> dict[str, Any]:
        try:
            data = tomllib.loads(self.path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"{self.path}: not readable TOML ({exc})") from None
        table = data.get("a2rl", data)
        if not isinstance(table, dict):
            raise SettingsError(f"{self.path}: a2rl must be a table of settings")
        unknown = [k for k in data if table is not data and k not in ("a2rl", "tasks")]
        values: dict[str, Any] = {}
        aliased: dict[str, Any] = {}
        legacy: dict[str, Any] = {}
        for key, value in table.items():
            if key in Settings.model_fields:
                section = _section_of(Settings.model_fields[key])
                if section is not None:
                    unknown += _unknown_keys(section, value, f"{key}.")
                if isinstance(section, type) and issubclass(section, OwnerTables) \
                        and isinstance(value, dict):  # its owners' tables by their keys
                    value = {k if k in section.model_fields else table_key(k): v
                             for k, v in value.items()}
                values[key] = value
            elif key in FLAT_ALIASES:
                aliased[FLAT_ALIASES[key]] = value
                self.spelled[FLAT_ALIASES[key]] = key
                self.renames.append((f"{self.path.name} {key}", toml_place(FLAT_ALIASES[key])))
            elif key in _LEGACY:
                legacy[key] = value
            else:
                unknown.append(key)
        refuse_unknown_key(self.path, unknown)
        for path, value in aliased.items():
            put(values, path, value, replace=False)
        if legacy:
            values["legacy_task_settings"] = {**values.get("legacy_task_settings", {}),
                                              **legacy}
        tables = data.get("tasks")
        if isinstance(tables, dict):
            values["tasks"] = tables
        return values


def _unknown_keys(section: type[Section], value: Any, prefix: str) -> list[str]:
    """The keys of a section's table that are none of its settings, dotted."""
    if not isinstance(value, dict):
        return []  # not a table: validation says what is allowed
    unknown = []
    for key, inner in value.items():
        field = section.model_fields.get(key)
        if field is None and issubclass(section, OwnerTables) and isinstance(inner, dict):
            continue  # a backend's or engine's table: its owner's section checks it
        if field is None:
            unknown.append(prefix + key)
        elif (sub := _section_of(field)) is not None:
            unknown += _unknown_keys(sub, inner, f"{prefix}{key}.")
    return unknown


def refuse_unknown_key(config_file: Path, keys: list[str]) -> None:
    """Name the first key that is no setting, and the settings it is closest to."""
    if not keys:
        return
    key = keys[0]
    close = difflib.get_close_matches(key, [*setting_paths(), *FLAT_ALIASES, *_LEGACY], n=3,
                                      cutoff=0.6)
    names = [repr(c) for c in close]
    hint = (f"; did you mean {', '.join(names[:-1])} or {names[-1]}?" if len(names) > 1
            else f"; did you mean {names[0]}?" if names else "")
    raise SettingsError(f"{config_file}: {key!r} is not a setting{hint} (a2rl config show "
                        "lists them)")


# --- loading ----------------------------------------------------------------------------------

class Sources(dict[str, str]):
    """Where each setting (by dotted path) came from: "default", "cli", "env" or "file:PATH";
    `spelled` has the name a deprecated value was given under (`A2RL_DOCKER_MEMORY`), and
    `renames` the (old, new) names to say when the settings are found good."""

    spelled: dict[str, str]
    renames: list[tuple[str, str]]


def origin(name: str, source: str, value: Any, spelled: str | None = None) -> str:
    """A value where a user would look for it: `FILE: key = value`, `VAR=value`, `--flag value`
    (`name` a dotted path; `spelled` the deprecated name it was given under, if it was)."""
    if source.startswith("file:"):
        return f"{source[5:]}: {spelled or name} = {value!r}"
    if source == "env":
        return f"{spelled or env_name(name)}={_as_typed(name, value)!r}"
    if source == "cli":
        return f"--{name.rpartition('.')[2].replace('_', '-')} {value!r}"
    return f"{name} = {value!r}"


def _as_typed(name: str, raw: Any) -> Any:
    """A variable's text as the number it reads as, for a numeric setting (`A2RL_X=0`)."""
    try:
        field: FieldInfo | None = field_at(name)
    except KeyError:
        field = _LEGACY.get(name, (None,))[0]
    kind = field.annotation if field is not None else None
    if isinstance(raw, str) and kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            return raw
    return raw


def allowed_message(error: Any, source: str = "") -> str:
    """What pydantic says is allowed, without its "Input"/"Value error" openings; a variable
    that is no number says so as a variable would be told."""
    if source == "env" and error["type"] in ("int_parsing", "float_parsing"):
        return "must be an integer" if error["type"] == "int_parsing" else "must be a number"
    if error["type"] == "extra_forbidden" or (  # a value where an owner's table would be
            error["type"] == "dict_type" and len(error["loc"]) == 2
            and error["loc"][0] in OWNER_TABLES):
        return "not a setting (a2rl config show lists them)"
    return str(error["msg"]).removeprefix("Input ").removeprefix("Value error, ")


def _nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys ({"sandbox.backend": "docker"}) as nested tables; None values dropped."""
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        if value is not None:
            put(tree, canonical(path), value)
    return tree


def load_settings(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
    *, warn: bool = True,
) -> tuple[Settings, Sources]:
    """Resolve settings and say where each value came from (default, file, env or cli).
    `overrides` are the command line's, by dotted path (`{"sandbox.backend": "docker"}`; None:
    not given). `warn`: say on stderr which deprecated names were used.

    Raises `SettingsError` naming the file, variable or flag of a bad value and what is allowed.
    """
    for declare in _DECLARERS:
        declare()
    env = os.environ if environ is None else environ
    cli = _nested(overrides or {})
    home = Path(env.get("A2RL_HOME") or cli.get("home") or "~/.a2rl").expanduser()
    config_file = home / "config.toml"
    try:
        # first over later: the order pydantic-settings merges them in
        ordered: list[tuple[str, PydanticBaseSettingsSource]] = [
            ("cli", InitSettingsSource(Settings, cli)), ("env", _Environment(env)),
            (f"file:{config_file}", _ConfigFile(config_file))]
        states = [(label, source()) for label, source in ordered]
    except SourceError as exc:
        raise SettingsError(f"bad settings: {exc}") from None
    sources = Sources({path: "default" for path in setting_paths()})
    sources.spelled, sources.renames = {}, []
    given: dict[str, tuple[str, Any]] = {}  # path -> (source, value) of the value in force
    for (label, state), (_, source) in zip(reversed(states), reversed(ordered), strict=True):
        spelled = source.spelled if isinstance(source, _Spelled) else {}
        sources.renames += source.renames if isinstance(source, _Spelled) else []
        for path, value in leaves(state):
            sources[path], given[path] = label, (label, value)
            if path in spelled:
                sources.spelled[path] = spelled[path]
            else:
                sources.spelled.pop(path, None)
        for name, value in state.get("legacy_task_settings", {}).items():
            given[name] = (label, value)
    for name in _LEGACY.keys() & given.keys():
        source, value = given[name]
        try:
            check_legacy_setting(name, value)
        except ValidationError as exc:
            raise SettingsError(f"{origin(name, source, value)}: "
                                f"{allowed_message(exc.errors(include_url=False)[0], source)}"
                                ) from None
    try:
        settings = Settings(_build_sources=(tuple(s for _, s in ordered), {}))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = [str(part) for part in error["loc"]]
        for end in range(len(loc), 0, -1):  # the deepest place a source gave a value for
            path = ".".join(loc[:end])
            if path in given:
                source, value = given[path]
                where = origin(path, source, value, sources.spelled.get(path))
                raise SettingsError(f"{where}: {allowed_message(error, source)}") from None
        raise SettingsError(f"bad settings: {allowed_message(error)}") from None
    if warn:  # only once they load: a bad value's error is the one line a user sees
        warn_deprecated(sources.renames)
    return settings, sources
