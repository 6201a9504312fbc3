"""Task options: each task's own knobs, as a pydantic model the task declares.

Why per task: a data folder, a reference file or a product count means something to one task
only, and a task from a plugin cannot add fields to the global `Settings`. So a task names its
options in a `TaskOptions` subclass (`Task.options_model`); `a2rl tasks <id>` lists them and
they are set, later over earlier, by:

1. the model's defaults;
2. deprecated global settings that used to hold them (`gsm8k_dir`, `A2RL_GSM8K_DIR`,
   `task_base_models`...), when given: a task's options declare their old names
   (`legacy_settings`), registered with the settings when the class is made, so that settings
   accept them without naming any task (`Settings.legacy_task_settings` holds their values);
3. the `[tasks.<id>]` table of `$A2RL_HOME/config.toml` (`Settings.tasks`);
4. `-T key=value` on `a2rl run/create/fleet` (`Task.with_options`).

They are resolved once, when a run is made (`Task.resolved`: by `a2rl create/run` before their
checks, else by `create_run`), and recorded on the run (`Run.task_options`), in its frozen
evaluation config and in every evaluation's provenance. Everything after reads the record
(`Task.with_recorded_options`: the run's checks, workspace, services, grader and audit) and
never the settings of the process it runs in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from a2rl.settings import register_legacy_setting

if TYPE_CHECKING:
    from a2rl.settings import Settings


class OptionsError(ValueError):
    """A bad task option: the message is one line naming the task, the key and what is
    allowed."""


class TaskOptions(BaseModel):
    """The options every task has; a task with its own subclasses this."""

    model_config = ConfigDict(extra="forbid")

    base_model: str = Field("", description="this task's base model (hub id, folder or "
                            "tiny-llama); empty: the global base_model, else the task's "
                            "default")

    #: option -> the deprecated global setting (config.toml key, `A2RL_<NAME>` variable) that
    #: still sets it; only the built-in tasks that had such settings declare any
    legacy_settings: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Register the old names with the settings (once the fields are made, to check a
        value as the option does when the settings load)."""
        super().__pydantic_init_subclass__(**kwargs)
        for option, name in cls.legacy_settings.items():
            register_legacy_setting(name, cls.model_fields[option])

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """Name, type, default and description of each option (`a2rl tasks <id>`)."""
        rows = []
        for name, field in cls.model_fields.items():
            kind = getattr(field.annotation, "__name__", None) or str(field.annotation)
            rows.append({"name": name, "type": kind, "default": field.get_default(),
                         "description": field.description or "",
                         "deprecated_setting": cls.legacy_settings.get(name, "")})
        return rows

    @classmethod
    def resolve(cls, task_id: str, settings: Settings,
                overrides: Mapping[str, Any] | None = None) -> TaskOptions:
        """The options in force for `task_id` (see the module docstring for the order).

        Raises `OptionsError` on an unknown key or a bad value."""
        from a2rl.settings import task_key

        values: dict[str, Any] = {}
        legacy_base = settings.task_base_models.get(task_key(task_id), "")
        if legacy_base and "base_model" in cls.model_fields:
            values["base_model"] = legacy_base
        for option, name in cls.legacy_settings.items():
            if name in settings.legacy_task_settings:
                values[option] = settings.legacy_task_settings[name]
        table = settings.tasks.get(task_id, {})
        check_keys(cls, task_id, table, where=f"[tasks.{task_id}] in config.toml")
        values.update(table)
        check_keys(cls, task_id, overrides or {}, where="-T")
        values.update(overrides or {})
        return cls._checked(task_id, values)

    @classmethod
    def validated(cls, task_id: str, record: Mapping[str, Any]) -> TaskOptions:
        """`record` (options a run recorded, or -T pairs alone) checked as options, with no
        setting read: the defaults fill what it leaves out. `OptionsError` on an unknown key
        or a bad value."""
        check_keys(cls, task_id, record, where="the run's recorded options")
        return cls._checked(task_id, dict(record))

    @classmethod
    def _checked(cls, task_id: str, values: dict[str, Any]) -> TaskOptions:
        try:
            return cls(**values)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            key = ".".join(str(p) for p in error["loc"])
            allowed = error["msg"].removeprefix("Input ").removeprefix("Value error, ")
            raise OptionsError(f"task {task_id}: option {key}={values.get(key)!r}: {allowed}"
                               ) from None


def check_keys(model: type[TaskOptions], task_id: str, values: Mapping[str, Any],
               where: str) -> None:
    """Refuse keys the task does not have, naming the ones it does."""
    unknown = sorted(set(values) - set(model.model_fields))
    if unknown:
        known = ", ".join(model.model_fields)
        raise OptionsError(f"task {task_id}: no option {unknown[0]!r} ({where}); its options "
                           f"are: {known}")


def parse_assignments(pairs: Iterable[str], flag: str = "-T") -> dict[str, str]:
    """`["key=value", ...]` (each a repeated `flag`: `-T`, `--agent-option`) -> {key: value};
    the value may contain `=`, a later key wins. The CLI's one KEY=VALUE parser."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise OptionsError(f"{flag} {pair!r}: use {flag} key=value")
        out[key.strip()] = value
    return out
