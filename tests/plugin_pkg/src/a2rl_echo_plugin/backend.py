"""The `stamped-local` sandbox backend: the local (bubblewrap) backend under a name of its own,
which also tells every job which backend made its sandbox (`A2RL_STAMPED_BY`).

A backend is a sandbox class with the members the registry checks (`config_for`,
`run_options`, `clean_up`, a2rl's `sandbox/base.py`); this one inherits them, its walls and
its clean-up from the local backend and changes one thing, so that a test can see that a run
of `--backend stamped-local` ran its jobs here.
"""

from __future__ import annotations

from a2rl.sandbox.base import BackendConfig, SandboxSpec
from a2rl.sandbox.local import LocalSandbox

NAME = "stamped-local"


class StampedLocalSandbox(LocalSandbox):
    def __init__(self, spec: SandboxSpec, config: BackendConfig | None = None) -> None:
        super().__init__(spec.model_copy(update={"env": {**spec.env, "A2RL_STAMPED_BY": NAME}}),
                         config)
