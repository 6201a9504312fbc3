"""The sections of `Settings`, one small module each, named for the code it configures.

Where they live, and why here: each section's owner (the server, the sandbox's backends, the
grader, the recording tools, the judge's and the narrative's clients) sits in a layer above the
core, and the core imports nothing of a2rl's (`tests/test_import_graph.py`). A registration
mechanism (each owner adding its section when imported) was the other way; it was not chosen
because `Settings` would then be a type only known at run time: `settings.sandbox.docker.memory`
would have no static type for a reader, an editor or a type checker, and a setting would
depend on which packages a process happened to import (a grading worker rebuilds settings
before it loads tasks). So the section models are declared here, in the core, one module per
owner, and `a2rl/settings.py` assembles them. An owner reads only its own section
(`settings.sandbox.docker`, `settings.judge`).

Grading engines have no section of their own: no engine has a setting yet; one that gets one
adds `grading.<engine>` beside `sandbox.<backend>` here.
"""

from .grading import GradingSettings
from .judge import JudgeSettings, NarrativeSettings
from .prices import ModelPrice
from .recording import RecordingSettings
from .sandbox import DockerSettings, LocalSettings, SandboxSettings
from .server import ServerSettings, ServicesSettings

__all__ = ["DockerSettings", "GradingSettings", "JudgeSettings", "LocalSettings",
           "ModelPrice", "NarrativeSettings", "RecordingSettings", "SandboxSettings",
           "ServerSettings", "ServicesSettings"]
