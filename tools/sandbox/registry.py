"""The sandbox backends `--backend` and the `backend` setting choose from, by name.

Built on `a2rl.registry.Registry` like tasks and agents, so the backends are found the same way
and loaded only when a run first starts its sandbox (the docker backend's client library is
imported by nobody who runs locally). There is no entry-point group for backends: the backend
is part of the settings' and the CLI's contract (`local` or `docker`), and a third one would
need its own isolation review before a run could trust it.
"""

from __future__ import annotations

from a2rl.registry import Registry

from .base import Sandbox, SandboxSpec

#: name -> the class that builds the sandbox from a `SandboxSpec`, in the order we document.
BUILTIN_BACKENDS: dict[str, str] = {
    "local": "a2rl.tools.sandbox.local:LocalSandbox",
    "docker": "a2rl.tools.sandbox.docker:DockerSandbox",
}

BACKENDS: Registry[Sandbox] = Registry("sandbox backend", plural="backends", check=callable)
for _name, _target in BUILTIN_BACKENDS.items():
    BACKENDS.register(_name, _target, source="builtin")


def create_sandbox(backend: str, spec: SandboxSpec) -> Sandbox:
    """A new, unstarted sandbox of `backend` (`UnknownName`/`PluginLoadError`, `KeyError`s)."""
    return BACKENDS.create(backend, spec)
