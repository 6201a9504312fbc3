"""Settings: command line over environment over `$A2RL_HOME/config.toml` over defaults.

One resolved `Settings` object is passed down explicitly; nothing reads the environment on its
own, so that a test (or a second server in one process) can hold different settings: building
`Settings(...)` takes its arguments and the defaults only. `load_settings` adds the sources,
pydantic-settings' own: the environment (`A2RL_` prefix) and the TOML file, behind the command
line's values, and says where each value came from (`a2rl config show`).

Deprecated settings of tasks' options (config.toml keys and `A2RL_<NAME>` variables from before
tasks had options) are named by the tasks that own them, never here: a task's options declare
their old names (`a2rl.tasks.options.TaskOptions.legacy_settings`), registered when the class is
made (`register_legacy_setting`; `load_settings` first has the tasks' package import the
declarations, `register_legacy_declarations`). Their values are kept in
`Settings.legacy_task_settings` and set the option when the task resolves its options.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings import SettingsError as SourceError

from .layout import BASE_MODEL, DATA, ENV, LOGS, OUTPUT

ENV_PREFIX = "A2RL_"
#: the settings that are sizes ("16g"), checked with `parse_size` when settings load
SIZE_FIELDS = ("docker_memory", "docker_shm_size", "sandbox_memory", "sandbox_disk",
               "sandbox_file_size", "job_log_max_bytes", "stage_keep_bytes")
#: a backend's or an engine's name: the registries (`a2rl.sandbox.registry`,
#: `a2rl.grading.engine_select`) sit above the settings and say which names exist, where the
#: name is used (`a2rl create`, the grader); here it is only checked to be a name
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
_TASK_MODEL_VAR = re.compile(r"^A2RL_(\w+?)_BASE_MODEL$")
#: settings that are tables, never variables: set in config.toml (and `-T`)
_NOT_VARIABLES = ("tasks", "legacy_task_settings")


class ModelPrice(BaseModel):
    """What a driver model costs, in USD per million tokens (`model_prices`): the input
    tokens not read from the provider's cache, the output tokens, and the cached input tokens
    (default: the input price)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)

    model_config = ConfigDict(extra="forbid")


class Settings(BaseSettings):
    """Every knob of an installation. Field descriptions are shown by `a2rl config show`."""

    home: Path = Field(Path("~/.a2rl"), description="where runs, secrets and the store live")
    db_url: str = Field("", description="SQLAlchemy URL of the store; default SQLite in home")
    backend: str = Field(
        "local", pattern=NAME_PATTERN, description="default sandbox backend: local, docker, or "
        "one an installed package adds (entry point `a2rl.backends`); `a2rl create -h` lists them")
    unsafe_local: bool = Field(
        False, description="allow the local backend without bubblewrap for non-toy tasks"
    )
    http_host: str = Field("127.0.0.1", description="address `a2rl serve --http` listens on")
    http_port: int = Field(8765, ge=1, le=65535,
                           description="port `a2rl serve --http` listens on")
    max_wait_s: float = Field(60.0, gt=0, description="upper bound on any tool's wait_s")
    max_run_threads: int = Field(
        8, ge=1, description="worker threads one run's tool calls hold at once, and as many for "
        "its waits on jobs; more wait their turn (a server serves many runs over HTTP: one run's "
        "calls must not starve the rest)")
    # The HTTP server is shared by every run: what one token or one address may hold of it
    # (server/http_limits.py, server/http_connections.py; README "Serving many runs").
    http_sessions_per_run: int = Field(
        8, ge=1, description="MCP sessions one run holds open on the HTTP server; opening one "
        "more ends that run's least recently used session (never another run's)")
    http_session_idle_s: float = Field(
        900.0, gt=0, description="an HTTP session with no request in flight (no open stream) "
        "for this long is ended; a run's sessions also end when the run ends")
    http_header_timeout_s: float = Field(
        10.0, gt=0, description="seconds a connection has to send a request's headers (from "
        "its opening or its previous answer); past it the connection is closed")
    http_body_timeout_s: float = Field(
        30.0, gt=0, description="seconds a request has to send its whole body once its headers "
        "are in; past it it gets 408 and the connection is closed")
    http_requests_per_s: float = Field(
        20.0, gt=0, description="HTTP requests per second one run's token is answered (a burst "
        "of as many as http_max_requests_per_run); faster ones get 429 at once, counted in the "
        "run's http.refused row")
    http_max_requests_per_run: int = Field(
        64, ge=1, description="HTTP requests of one run's token in flight at once (open "
        "streams included); one more gets 429 at once")
    http_max_connections_per_run: int = Field(
        128, ge=1, description="connections whose last request carried one run's token; one more "
        "gets 429 and is closed")
    http_max_requests_per_address: int = Field(
        256, ge=1, description="HTTP requests in flight from one client address (all its runs "
        "and token-less requests together); one more gets 429 at once")
    http_max_connections_per_address: int = Field(
        512, ge=1, description="connections open from one client address; one more closes that "
        "address's longest idle connection, or is refused with 503 when none is idle")
    http_max_connections: int = Field(
        4096, ge=1, description="connections open to the HTTP server from every address "
        "together (file descriptors); past it as per address")
    http_resume_bytes_per_session: int = Field(
        2_000_000, ge=0, description="bytes of server messages one HTTP session keeps so that a "
        "client that lost a stream gets them again (SSE Last-Event-ID); the oldest go first")
    http_resume_bytes: int = Field(
        64_000_000, ge=0, description="the same for every session together; the oldest go "
        "first")
    http_sse_retry_ms: int = Field(
        1000, ge=0, description="the SSE retry a client waits before it resumes a lost stream")
    service_max_connections: int = Field(
        16, ge=1, description="connections one run's task services (unix sockets in the "
        "sandbox) hold open at once; one more is refused with a one-line error")
    service_requests_per_s: float = Field(
        20.0, gt=0, description="requests per second one run's task services answer (a burst of "
        "as many); faster ones are refused at once, never queued (each may be a paid call)")
    service_max_bytes: int = Field(
        256_000_000, ge=1, description="bytes of requests and answers one run's task services "
        "carry per serving process; past it every request is refused")
    output_head_bytes: int = Field(8_000, ge=0, description="bytes of output kept from the start")
    output_tail_bytes: int = Field(8_000, ge=0, description="bytes of output kept from the end")
    revision_max_bytes: int = Field(1_000_000, ge=0, description="larger files are not revisioned")
    revision_run_max_bytes: int = Field(
        256 << 20, ge=0, description="file content bytes one run's revisions may store; past it "
        "a change is recorded by path, size and sha256 without its content (0: no limit)")
    revision_exclude: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [
            f"{OUTPUT}/*", f"{LOGS}/*", f"{BASE_MODEL}/*", f"{DATA}/*", f"{ENV}/*", ".cache/*",
            "*/__pycache__/*", "__pycache__/*", "*.pyc", ".a2rl/*",
        ],
        description="glob patterns (workspace-relative) never revisioned",
    )
    job_log_keep_bytes: int = Field(10_000_000, ge=0,
                                    description="job log bytes stored (head+tail)")
    job_log_run_keep_bytes: int = Field(
        256 << 20, ge=0, description="job log bytes stored for one run, all its jobs together; "
        "past it a job's log keeps its size only (0: no limit)")
    tool_arg_keep_bytes: int = Field(65_536, ge=1, description="bytes of one tool argument stored "
                                     "(longer ones: cut, with their sha256 and size)")
    tool_arg_run_keep_bytes: int = Field(
        256 << 20, ge=0, description="bytes of whole tool arguments one run keeps as blobs where "
        "the stored ones were cut (the audit reads them); past it a cut call keeps its cut "
        "copy only and the audit says so (0: no limit)")
    max_tool_args_bytes: int = Field(8_000_000, ge=1, description="largest tool call (all its "
                                     "arguments, UTF-8 bytes); larger calls are refused")
    audit_read_bytes: int = Field(
        2 << 30, ge=0, description="workspace file bytes the end-of-run audit reads at most, "
        "holes not counted; past it a file is flagged as not fully read (0: no limit)")
    default_budget: str = Field("2h", description="budget when neither flag nor task gives one")
    docker_image: str = Field("", description="sandbox image; default: the task's, else the "
                              "offline test image when only that one is built")
    docker_memory: str = Field("16g", description="memory limit of a run's container")
    docker_pids_limit: int = Field(4096, ge=0, description="process limit of a run's container")
    docker_cpus: float = Field(0.0, ge=0, description="CPU limit of a run's container (0: none)")
    docker_shm_size: str = Field("2g", description="/dev/shm size of a run's container")
    sandbox_uid: int = Field(61000, ge=0, description="user (and group) id jobs run as when the "
                             "server runs as root, on both backends; owns the workspace")
    sandbox_memory: str = Field("32g", description="memory limit of a local run's jobs "
                                "(a cgroup; where none is writable, not limited)")
    sandbox_pids_limit: int = Field(4096, ge=0, description="process limit of a local run's "
                                    "jobs (0: none)")
    sandbox_disk: str = Field("200g", description="bytes a run's workspace may take; the "
                              "job writing past it is ended (both backends)")
    sandbox_disk_volume: Literal["auto", "off"] = Field(
        "auto", description="auto: when the server is root and has loop devices, each "
        "workspace is its own size-limited filesystem (sandbox_disk plus the task's inputs), so "
        "the kernel stops a write past the limit; off: the supervisor's watch alone")
    sandbox_file_size: str = Field("100g", description="largest file a job may write "
                                   "(RLIMIT_FSIZE, both backends)")
    job_log_max_bytes: str = Field("1g", description="output bytes one job may write to its "
                                   "log; more ends the job as a log flood")
    stage_keep_bytes: str = Field(
        "20g", description="bytes of checkpoints one run keeps at its finish for the stages of "
        "its final checkpoint's lineage the agent never submitted, to score them (stage "
        "attribution; 0: no cap)")
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
    judge_base_url: str = Field("https://api.openai.com/v1",
                                description="OpenAI-compatible endpoint of the judge, up to /v1")
    judge_model: str = Field("gpt-4-turbo", description="the judge model (AlpacaEval 2.0's)")
    judge_api_key_env: str = Field("OPENAI_API_KEY",
                                   description="name of the variable holding the judge's key")
    judge_max_retries: int = Field(4, ge=0, description="judge retries after a failed request")
    judge_timeout_s: float = Field(120.0, gt=0, description="timeout of one judge request")
    judge_concurrency: int = Field(8, ge=1, description="judge requests in flight")
    narrative_base_url: str = Field("", description="OpenAI-compatible endpoint for `a2rl "
                                    "report --narrative`, up to /v1; empty: judge_base_url")
    narrative_model: str = Field("", description="model writing report narratives; empty: "
                                 "judge_model")
    narrative_api_key_env: str = Field("", description="name of the variable holding the "
                                       "narrative endpoint's key; empty: judge_api_key_env")
    narrative_timeout_s: float = Field(60.0, gt=0, description="timeout of one narrative request")
    grader_max_new_tokens: int = Field(
        0, ge=0, description="cap on every task's generation length for smoke runs (0: the task's "
        "own; a capped evaluation records it in its provenance)")
    checkpoint_check_memory_gib: float = Field(
        0.0, ge=0, description="address space (GiB) of the process that loads a submission to "
        "compare it with the base (0: 4 GiB plus 24 bytes per parameter of the base model)")
    checkpoint_check_timeout_s: float = Field(
        600.0, gt=0, description="seconds that process may take before it is killed and the "
        "submission refused")
    grading_engine: str = Field(
        "auto", pattern=NAME_PATTERN, description="generation engine of the grader: auto (vLLM "
        "if installed and CUDA, else static-cache transformers), or force one: transformers, "
        "static, vllm, or one an installed package adds (entry point `a2rl.engines`; "
        "grading/engine_select.py)")

    grading_pause_cap_fraction: float = Field(
        0.25, ge=0, le=1, description="the most grading gives back to a run's clock, as a "
        "share of its budget: under a paused grading clock the time its jobs were frozen for "
        "its own evaluations, and under either clock the time its requests waited behind other "
        "runs' evaluations, together (its jobs are frozen for that long at most; past it "
        "grading time counts)")
    max_pending_grades: int = Field(
        2, ge=1, description="a run's submissions queued or being graded at once; one more is "
        "refused at submit_checkpoint until one is graded")
    submission_checks_per_minute: int = Field(
        12, ge=1, description="submit_checkpoint calls a run may have checked (copied, "
        "compared, validated) in any 60 seconds, refused ones included; one more is refused "
        "at once, unchecked, with the seconds to wait")
    model_prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="USD per million tokens of each driver model, for "
        "the cost ledger where the agent reports no cost and for --max-cost: a "
        "[model_prices.\"NAME\"] table of config.toml with input, output and cached_input, or "
        "A2RL_MODEL_PRICES as JSON; the model named as --model names it (or the part after its "
        "last /). Empty: such costs are unknown")
    gpu_sample_s: float = Field(
        1.0, gt=0, description="seconds between two NVML samples of a run's GPUs while its jobs "
        "run (the jobs' GPU seconds and peak GPU memory in the cost ledger; needs the "
        "nvidia-ml-py package and a driver, else not measured)")

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True,
                                      extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        **_: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`Settings(...)` reads no variable and no file: `load_settings` adds them."""
        return (init_settings,)

    @field_validator("revision_exclude", mode="before")
    @classmethod
    def _patterns(cls, value: Any) -> Any:
        """A variable holds the patterns comma-separated."""
        return [p for p in value.split(",") if p] if isinstance(value, str) else value

    @field_validator("task_base_models", mode="before")
    @classmethod
    def _task_pairs(cls, value: Any) -> Any:
        """A variable holds `task=model,task=model`."""
        return _pairs(value) if isinstance(value, str) else value

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
            raise ValueError(_allowed(exc.errors(include_url=False)[0])) from None

    @field_validator(*SIZE_FIELDS, mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        """A size is checked now, with the parser the sandbox applies it with, rather than
        when the first run's sandbox starts (a TOML integer is a number of bytes)."""
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            try:
                size = parse_size(value)
            except (ValueError, OverflowError):
                raise ValueError("not a size: use forms like 512m, 16g, 100k or a number of "
                                 "bytes") from None
            if size < 0:
                raise ValueError("a size cannot be negative")
        return value

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.home_dir / 'a2rl.db'}"

    @property
    def runs_dir(self) -> Path:
        return self.home_dir / "runs"


def task_key(task_id: str) -> str:
    """A task id as it appears in variable names: `A2RL_<KEY>_BASE_MODEL`, lower-cased."""
    return re.sub(r"[^a-z0-9]", "_", task_id.lower())


def _pairs(raw: str) -> dict[str, str]:
    """`a=x,b=y` -> {"a": "x", "b": "y"}."""
    pairs = (p.split("=", 1) for p in raw.split(",") if "=" in p)
    return {task_key(k.strip()): v.strip() for k, v in pairs}


class SettingsError(ValueError):
    """A setting with a bad value; the message names where it came from and what is allowed."""


# --- deprecated settings of tasks' options -------------------------------------------------

#: old name -> the field of the option it sets, and the adapter checking a value as that option
#: checks it; registered by the tasks' option declarations
_LEGACY: dict[str, tuple[FieldInfo, TypeAdapter[Any]]] = {}


def register_legacy_setting(name: str, field: FieldInfo) -> None:
    """Accept `name` (a config.toml key, an `A2RL_<NAME>` variable) as a deprecated setting
    holding a value of the option `field`. A task's options call this for each old name they
    declare, when their class is made."""
    if name in Settings.model_fields:
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


# --- sources ----------------------------------------------------------------------------------

class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over the mapping given (the process's by
    default), plus what is no field: the per-task base model variables
    (`A2RL_<TASK>_BASE_MODEL`) and the deprecated names tasks declare (`A2RL_<NAME>`)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self.environ.items() if v != ""}

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
            data["task_base_models"] = {**(_pairs(listed) if isinstance(listed, str)
                                           else listed), **per_task}
        legacy = {name: value for name in _LEGACY
                  if (value := self.env_vars.get(f"{ENV_PREFIX}{name}".lower()))}
        if legacy:
            data["legacy_task_settings"] = legacy
        return data


class _ConfigFile(TomlConfigSettingsSource):
    """pydantic-settings' TOML source for config.toml: settings at the top or under `[a2rl]`,
    tasks' tables under `[tasks.<id>]` (top-level even beside an `[a2rl]` table), a task's
    deprecated name into `legacy_task_settings`. A key that is none of these (a typo such as
    `sandbox_memroy`) would otherwise be silently not applied: it is refused by name."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            data = tomllib.loads(Path(file_path).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"{file_path}: not readable TOML ({exc})") from None
        table = data.get("a2rl", data)
        if not isinstance(table, dict):
            raise SettingsError(f"{file_path}: a2rl must be a table of settings")
        _refuse_unknown(file_path, [k for k in table
                                    if k not in Settings.model_fields and k not in _LEGACY]
                        + [k for k in data if table is not data and k not in ("a2rl", "tasks")])
        values = {k: v for k, v in table.items() if k in Settings.model_fields}
        legacy = {k: v for k, v in table.items() if k in _LEGACY}
        if legacy:
            values["legacy_task_settings"] = {**values.get("legacy_task_settings", {}),
                                              **legacy}
        tables = data.get("tasks")
        if isinstance(tables, dict):
            values["tasks"] = tables
        return values


def _refuse_unknown(config_file: Path, keys: list[str]) -> None:
    """Name the first key that is no setting, and the settings it is closest to."""
    if not keys:
        return
    key = keys[0]
    close = difflib.get_close_matches(key, [*Settings.model_fields, *_LEGACY], n=3,
                                      cutoff=0.6)
    names = [repr(c) for c in close]
    hint = (f"; did you mean {', '.join(names[:-1])} or {names[-1]}?" if len(names) > 1
            else f"; did you mean {names[0]}?" if names else "")
    raise SettingsError(f"{config_file}: {key!r} is not a setting{hint} (a2rl config show "
                        "lists them)")


# --- loading ----------------------------------------------------------------------------------

def origin(name: str, source: str, value: Any) -> str:
    """A value where a user would look for it: `FILE: key = value`, `VAR=value`, `--flag value`."""
    if source.startswith("file:"):
        return f"{source[5:]}: {name} = {value!r}"
    if source == "env":
        return f"{ENV_PREFIX}{name.upper()}={_as_typed(name, value)!r}"
    if source == "cli":
        return f"--{name.replace('_', '-')} {value!r}"
    return f"{name} = {value!r}"


def _as_typed(name: str, raw: Any) -> Any:
    """A variable's text as the number it reads as, for a numeric setting (`A2RL_X=0`)."""
    field = Settings.model_fields.get(name) or _LEGACY.get(name, (None,))[0]
    kind = field.annotation if field is not None else None
    if isinstance(raw, str) and kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            return raw
    return raw


def _allowed(error: Any, source: str = "") -> str:
    """What pydantic says is allowed, without its "Input"/"Value error" openings; a variable
    that is no number says so as a variable would be told."""
    if source == "env" and error["type"] in ("int_parsing", "float_parsing"):
        return "must be an integer" if error["type"] == "int_parsing" else "must be a number"
    return str(error["msg"]).removeprefix("Input ").removeprefix("Value error, ")


def load_settings(
    overrides: dict[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Settings, dict[str, str]]:
    """Resolve settings and say where each value came from (default, file, env or cli).

    Raises `SettingsError` naming the file, variable or flag of a bad value and what is allowed.
    """
    for declare in _DECLARERS:
        declare()
    env = os.environ if environ is None else environ
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    home = Path(env.get("A2RL_HOME") or cli.get("home") or "~/.a2rl").expanduser()
    config_file = home / "config.toml"
    try:
        # first over later: the order pydantic-settings merges them in
        ordered: list[tuple[str, PydanticBaseSettingsSource]] = [
            ("cli", InitSettingsSource(Settings, cli)), ("env", _Environment(env)),
            (f"file:{config_file}", _ConfigFile(Settings, toml_file=config_file))]
        states = [(label, source()) for label, source in ordered]
    except SourceError as exc:
        raise SettingsError(f"bad settings: {exc}") from None
    sources = {name: "default" for name in Settings.model_fields}
    given: dict[str, tuple[str, Any]] = {}  # name -> (source, value) of the value in force
    for label, state in reversed(states):
        for name, value in state.items():
            sources[name], given[name] = label, (label, value)
        for name, value in state.get("legacy_task_settings", {}).items():
            given[name] = (label, value)
    for name in _LEGACY.keys() & given.keys():
        source, value = given[name]
        try:
            check_legacy_setting(name, value)
        except ValidationError as exc:
            raise SettingsError(f"{origin(name, source, value)}: "
                                f"{_allowed(exc.errors(include_url=False)[0], source)}"
                                ) from None
    try:
        return Settings(_build_sources=(tuple(s for _, s in ordered), {})), sources
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        if name in given:
            source, value = given[name]
            raise SettingsError(f"{origin(name, source, value)}: {_allowed(error, source)}"
                                ) from None
        raise SettingsError(f"bad settings: {_allowed(error)}") from None


def parse_size(text: str | int) -> int:
    """Bytes in a size such as "16g", "512m", "100k" or "4096" (0 or "" for no limit)."""
    if isinstance(text, int):
        return text
    value = text.strip().lower().removesuffix("b")
    if not value:
        return 0
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if value[-1] in units:
        return int(float(value[:-1]) * units[value[-1]])
    return int(value)


def parse_duration(text: str) -> float:
    """Seconds in '90', '90s', '20m', '2h', '1h30m' or '1d'."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    if not text:
        raise ValueError("empty duration")
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total, number = total + float(number) * units[ch], ""
        else:
            raise ValueError(f"bad duration {text!r}: use forms like 90s, 20m, 2h, 1h30m")
    if number:
        total += float(number)
    if total <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return total
