"""What every section shares: refusing a key it does not have, and the name pattern of a
backend or an engine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

#: a backend's or an engine's name: the registries (`a2rl.sandbox.registry`,
#: `a2rl.grading.engine_select`) sit above the settings and say which names exist, where the
#: name is used (`a2rl create`, the grader); here it is only checked to be a name
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"


class Section(BaseModel):
    """A table of settings (`[sandbox.docker]` in config.toml): a typo is refused, never
    silently not applied."""

    model_config = ConfigDict(extra="forbid")
