"""ALFWorld's options (`a2rl tasks alfworld`; `-T key=value`, `[tasks.alfworld]`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..options import TaskOptions


class AlfWorldOptions(TaskOptions):
    data_dir: str = Field("", description="folder with ALFWorld's json_2.1.1/ games "
                          "(`a2rl alfworld download`); empty: $A2RL_HOME/data/alfworld")

    legacy_settings: ClassVar[dict[str, str]] = {"data_dir": "alfworld_dir"}
