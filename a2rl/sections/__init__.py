"""The sections of `Settings`, one small module each, named for the code it configures.

Two kinds, and why each lives where it does:

- **The top-level sections** (`[server]`, `[recording]`, `[sandbox]`, `[grading]`, `[judge]`,
  `[narrative]`, prices) are declared here, in the core. Their owners (the server, the
  recording tools, the grader, the judge's and the narrative's clients) sit in layers above the
  core, which imports nothing of a2rl's (`tests/test_import_graph.py`); had they registered
  their sections when imported, `Settings` would be a type known only at run time:
  `settings.judge.model` would have no static type for a reader, an editor or a type checker,
  and a setting would depend on which packages a process happened to import (a grading worker
  rebuilds settings before it loads tasks). So these are static fields of `Settings`.
- **A backend's or an engine's own section** (`[sandbox.docker]`, `[grading.<engine>]`) is its
  owner's: declared in the backend's or engine's module, `class DockerSettings(Section,
  place="sandbox.docker")`, and named by its registered class (`DockerSandbox.settings_section`),
  so a backend or an engine from an installed package has settings exactly as the built-in ones
  do, and the built-in ones are one file plus registration. `[sandbox]` and `[grading]` hold
  those tables raw (`base.OwnerTables`); the owner reads its own, statically typed, with
  `settings.sandbox.section(DockerSettings)`. A section declares its place when its class is
  made (`base.declared`), and the registries tell the core how to load an owner's section by
  name (`base.register_finder`), which is what `Settings.updated`, origins and the deprecated
  flat names (`docker_memory`) need of them; `a2rl config show` loads every registered owner
  to list its section, and every command checks each table present against its owner's
  section, loading only the owners that have a table (`a2rl.cli.context`).
"""

from .base import OwnerTables, Section
from .grading import GradingSettings
from .judge import JudgeSettings, NarrativeSettings
from .prices import ModelPrice
from .recording import RecordingSettings
from .sandbox import SandboxSettings
from .server import ServerSettings, ServicesSettings

__all__ = ["GradingSettings", "JudgeSettings", "ModelPrice", "NarrativeSettings",
           "OwnerTables", "RecordingSettings", "SandboxSettings", "Section", "ServerSettings",
           "ServicesSettings"]
