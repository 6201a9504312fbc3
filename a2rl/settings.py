"""Settings: command line over environment over `$A2RL_HOME/config.toml` over defaults.

One resolved `Settings` object is passed down explicitly; nothing reads the environment on its
own, so that a test (or a second server in one process) can hold different settings.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

ENV_PREFIX = "A2RL_"


class Settings(BaseModel):
    """Every knob of an installation. Field descriptions are shown by `a2rl config show`."""

    home: Path = Field(Path("~/.a2rl"), description="where runs, secrets and the store live")
    db_url: str = Field("", description="SQLAlchemy URL of the store; default SQLite in home")
    backend: Literal["local", "docker"] = Field("local", description="default sandbox backend")
    unsafe_local: bool = Field(
        False, description="allow the local backend without bubblewrap for non-toy tasks"
    )
    http_host: str = Field("127.0.0.1", description="address `a2rl serve --http` listens on")
    http_port: int = Field(8765, description="port `a2rl serve --http` listens on")
    max_wait_s: float = Field(60.0, description="upper bound on any tool's wait_s")
    output_head_bytes: int = Field(8_000, description="bytes of output kept from the start")
    output_tail_bytes: int = Field(8_000, description="bytes of output kept from the end")
    revision_max_bytes: int = Field(1_000_000, description="larger files are not revisioned")
    revision_exclude: list[str] = Field(
        default_factory=lambda: [
            "output/*", "logs/*", "base_model/*", "data/*", "env/*", ".cache/*",
            "*/__pycache__/*", "__pycache__/*", "*.pyc", ".a2rl/*",
        ],
        description="glob patterns (workspace-relative) never revisioned",
    )
    job_log_keep_bytes: int = Field(10_000_000, description="job log bytes stored (head+tail)")
    default_budget: str = Field("2h", description="budget when neither flag nor task gives one")
    docker_image: str = Field("", description="sandbox image; default: the task's, else the "
                              "offline test image when only that one is built")
    docker_memory: str = Field("16g", description="memory limit of a run's container")
    docker_pids_limit: int = Field(4096, description="process limit of a run's container")
    docker_cpus: float = Field(0.0, description="CPU limit of a run's container (0: none)")
    docker_shm_size: str = Field("2g", description="/dev/shm size of a run's container")

    model_config = {"extra": "forbid"}

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.home_dir / 'a2rl.db'}"

    @property
    def runs_dir(self) -> Path:
        return self.home_dir / "runs"


def _coerce(name: str, raw: str) -> Any:
    field = Settings.model_fields[name]
    if field.annotation is bool:
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if name == "revision_exclude":
        return [p for p in raw.split(",") if p]
    return raw


def load_settings(
    overrides: dict[str, Any] | None = None, environ: dict[str, str] | None = None
) -> tuple[Settings, dict[str, str]]:
    """Resolve settings and say where each value came from (default, file, env or cli)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources = {name: "default" for name in Settings.model_fields}
    home = Path(env.get("A2RL_HOME") or (overrides or {}).get("home") or "~/.a2rl").expanduser()
    config_file = home / "config.toml"
    if config_file.is_file():
        data = tomllib.loads(config_file.read_text())
        for key, value in data.get("a2rl", data).items():
            if key in Settings.model_fields:
                values[key], sources[key] = value, f"file:{config_file}"
    for name in Settings.model_fields:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw not in (None, ""):
            values[name], sources[name] = _coerce(name, raw), "env"
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key], sources[key] = value, "cli"
    return Settings(**values), sources


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
