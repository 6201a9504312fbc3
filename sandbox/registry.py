"""The sandbox backends `--backend` and the `backend` setting choose from, by name, and the only
way the rest of a2rl reaches one.

Built on `a2rl.registry.Registry` like tasks and agents, so the backends are found the same way
and loaded only when first used (the docker backend's client library is imported by nobody who
runs locally). A name resolves to the backend's sandbox class (`base.SandboxBackend`), which
also says what a run fixes of it when it is made (`run_options`), how its config is built
(`config_for`) and what a starting server cleans up (`clean_up`): the server calls these
functions with the run's backend name and never names a backend itself.

A backend is one module beside the others (`local.py`, `docker.py`; neither imports the
other), registered here, or one module of an installed package named by the entry-point group
`a2rl.backends` (built-in names win); its settings are its own section, declared in its module
(`settings_section`: `[sandbox.<name>]`, `a2rl.sections`). `--backend` and the `backend`
setting offer what this registry knows. A backend draws the walls every run relies on, so one
from a package is that package's to review (docs/adding-a-task.md, "Adding a sandbox
backend"); the run records its name and the package it came from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from a2rl.registry import Registry, RegistryError
from a2rl.sections.base import Section, register_finder, registry_finder, section_of_owner
from a2rl.settings import Settings

from .base import BackendConfig, Sandbox, SandboxBackend, SandboxChoices, SandboxSpec

log = logging.getLogger(__name__)

#: name -> the sandbox class of that backend, in the order we document.
BUILTIN_BACKENDS: dict[str, str] = {
    "local": "a2rl.sandbox.local:LocalSandbox",
    "docker": "a2rl.sandbox.docker:DockerSandbox",
}

def _is_backend(target: object) -> bool:
    return callable(target) and all(
        hasattr(target, name) for name in ("config_for", "run_options", "clean_up"))


BACKENDS: Registry[Sandbox] = Registry("sandbox backend", plural="backends",
                                       group="a2rl.backends", check=_is_backend)
for _name, _target in BUILTIN_BACKENDS.items():
    BACKENDS.register(_name, _target, source="builtin")
# the settings find a backend's section (`[sandbox.<name>]`) through this registry
register_finder("sandbox", registry_finder("sandbox", BACKENDS.names, BACKENDS.load))


def backend(name: str) -> SandboxBackend:
    """The backend called `name`, loaded (`UnknownName`/`PluginLoadError`, `KeyError`s)."""
    return BACKENDS.load(name)  # type: ignore[return-value]


def backend_section(name: str) -> type[Section] | None:
    """The section of settings backend `name` declares (`[sandbox.<name>]`), loading it
    (`UnknownName`/`PluginLoadError`); None when it has none."""
    return section_of_owner(backend(name), "sandbox", name)


def local_unsafe(settings: Settings) -> bool:
    """`[sandbox.local] unsafe`: the local backend may run any task without bubblewrap. A run
    records it when it is made (`RunConfig.unsafe_local`), and the server names no backend."""
    from .local import LocalSettings  # loaded when first used, as every backend is here

    return settings.sandbox.section(LocalSettings).unsafe


def backend_config(name: str, settings: Settings, fixed: dict[str, Any]) -> BackendConfig:
    """The config of a run of backend `name`: from what the run `fixed` when it was made
    (`RunSetup.sandbox` of its config), else from `settings` as they are now."""
    return backend(name).config_for(settings, fixed or {})


def create_sandbox(name: str, spec: SandboxSpec, config: BackendConfig | None = None) -> Sandbox:
    """A new, unstarted sandbox of backend `name` (`UnknownName`/`PluginLoadError`,
    `KeyError`s); `config` None: the backend's defaults."""
    return backend(name)(spec, config)


def run_options(name: str, settings: Settings, choices: SandboxChoices) -> dict[str, Any]:
    """What a run of backend `name` fixes of it when it is made, to be stored with the run
    as `RunSetup.sandbox` (nothing for a backend that reads the settings at every start)."""
    return backend(name).run_options(settings, choices)


def clean_up(runs: Iterable[tuple[str, str, bool]], store_id: str) -> dict[str, dict[str, Any]]:
    """At server start: each backend that ran some of this store's `runs` ((backend, run id,
    live) each) keeps what serves the live ones and removes what is left of the others. A
    backend that cannot be loaded (a name an older version knew) is logged and skipped: the
    server starts anyway. Returns what each backend reported, by name."""
    live: dict[str, set[str]] = {}
    for name, run_id, is_live in runs:
        found = live.setdefault(name, set())
        if is_live:
            found.add(run_id)
    done: dict[str, dict[str, Any]] = {}
    for name in sorted(live):
        try:
            done[name] = backend(name).clean_up(live[name], store_id)
        except RegistryError as exc:
            log.warning("no clean-up for the runs of sandbox backend %r: %s", name, exc)
    return done
