"""The `stamped-local` sandbox backend: the local (bubblewrap) backend under a name of its own,
which also tells every job which backend made its sandbox (`A2RL_STAMPED_BY`).

A backend is a sandbox class with the members the registry checks (`config_for`,
`run_options`, `clean_up`, a2rl's `sandbox/base.py`); this one inherits them, its walls and
its clean-up from the local backend and changes one thing, so that a test can see that a run
of `--backend stamped-local` ran its jobs here.

Its settings are its own section (`settings_section`), declared here with its place:
`[sandbox.stamped-local] stamp = "..."` in config.toml, or `A2RL_SANDBOX__STAMPED_LOCAL__STAMP`.
The local backend's own limits (`[sandbox.local]`) still apply to it.
"""

from __future__ import annotations

from pydantic import Field

from a2rl.sandbox.base import BackendConfig, SandboxSpec
from a2rl.sandbox.local import LocalConfig, LocalSandbox
from a2rl.sections import Section
from a2rl.settings import Settings

NAME = "stamped-local"


class StampedSettings(Section, place=f"sandbox.{NAME}"):
    stamp: str = Field(NAME, description="what every job of the backend finds in "
                       "A2RL_STAMPED_BY")


class StampedConfig(LocalConfig):
    """A run's config: the local backend's, and the stamp (read at every start)."""

    stamp: str = NAME

    @classmethod
    def from_settings(cls, settings: Settings) -> StampedConfig:
        local = LocalConfig.from_settings(settings)
        return cls(**local.model_dump(), stamp=settings.sandbox.section(StampedSettings).stamp)


class StampedLocalSandbox(LocalSandbox):
    config_type = StampedConfig
    settings_section = StampedSettings

    def __init__(self, spec: SandboxSpec, config: BackendConfig | None = None) -> None:
        stamp = config.stamp if isinstance(config, StampedConfig) else NAME
        super().__init__(spec.model_copy(update={"env": {**spec.env, "A2RL_STAMPED_BY": stamp}}),
                         config)
