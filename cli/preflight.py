"""Everything checked before a run is made, the same for `create`, `run` and `fleet`.

A run costs a workspace, a baseline (minutes to hours on a real model) and an agent's budget:
whatever would make it fail later is refused first, in one `a2rl: ...` line and exit 2:

1. the agent (`run`, `fleet`): its options against its model (unknown keys and wrong types
   refused with the names it has), then whether it is installed, has its key, and whether
   its endpoint answers an authenticated request (`clients.orchestrator.check_options`);
2. the task's base model (fetched once, or a one-line refusal naming `-T base_model=`);
3. the task's data (`a2rl.tasks.check_data`: present, in the task's schema, every split a run
   needs non-empty);
4. the sandbox backend and the grading engine: names their registries know (a package's
   included), loadable, and the engine able to run on this machine.

A fleet on a remote cluster checks only what does not depend on the machine (the agents'
options): its nodes check the rest before each run, with these same messages.
"""

from __future__ import annotations

from a2rl.cli.errors import fail, message
from a2rl.clients.registry import get_connector
from a2rl.grading.engine_select import chosen_engine
from a2rl.sandbox.registry import backend
from a2rl.settings import Settings
from a2rl.store import RunConfig
from a2rl.tasks import check_data, task_of_run


def check_run(settings: Settings, config: RunConfig, *, on_this_machine: bool = True) -> None:
    """Refuse `config` in one line (`fail`) when its run could not be made or its agent
    could not work; return when everything checked holds."""
    try:
        if config.agent is not None:
            _check_agent(config, on_this_machine)
        if on_this_machine:
            task = task_of_run(config.task_id, config.profile, config.task_options,
                               resolved=config.task_options_resolved, settings=settings)
            task.base_model_dir(settings)
            check_data(task, settings)
            backend(config.backend or settings.sandbox.backend)
            chosen_engine(settings)
    # an unknown name (KeyError), a bad option or data (AgentOptionsError, TaskDataError:
    # ValueErrors), an agent, base model or engine not available (RuntimeError,
    # BaseModelUnavailable, EngineUnavailable)
    except (KeyError, ValueError, RuntimeError) as exc:
        fail(message(exc))


def _check_agent(config: RunConfig, on_this_machine: bool) -> None:
    # the orchestrator imports the MCP SDK and the server: ~0.4 s of every command's start-up
    from a2rl.clients.orchestrator import check_options

    assert config.agent is not None
    connector = get_connector(config.agent)
    if on_this_machine:
        check_options(config, connector)
    else:
        connector.options_model.parse(config.agent, config.agent_options)
