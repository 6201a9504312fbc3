"""The Ray side of a fleet: connecting, what each run asks of a node, and the remote task.

Ray places each run on a node with a free GPU (or a free unit of a custom resource, for
nodes without GPUs and for tests); a2rl schedules nothing itself.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from a2rl.store import RunConfig

from .node import execute
from .plan import FleetPlan, run_label


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what is written to file descriptor 1 to stderr meanwhile. Ray's driver prints
    cluster events (a dead raylet, a worker's error) to stdout from its own threads, and
    `--json` promises nothing but the JSON document there."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def connect(address: str | None, local_resources: dict[str, float] | None = None) -> bool:
    """Connect to the cluster at `address` (`auto`, `ray://host:10001`, `host:6379`), or start
    a local Ray instance on this machine. True when the instance is ours to shut down."""
    import ray  # the optional `fleet` extra (ray, ~0.2 s to import): loaded when used

    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": True,
                              "logging_level": "warning"}
    if address:
        ray.init(address=address, **common)
        return False
    ray.init(resources=local_resources or None, include_dashboard=False, **common)
    return True


def disconnect() -> None:
    import ray  # the optional extra: see `connect`

    ray.shutdown()


def task_options(plan: FleetPlan) -> dict[str, Any]:
    """Ray options of one run's task. No retries: a run is not idempotent (it has a row, a
    workspace and a clock), so a lost run is marked failed and a resume makes a new one."""
    # SPREAD: runs go to the least loaded nodes first instead of filling one node up.
    opts: dict[str, Any] = {"max_retries": 0, "retry_exceptions": False,
                            "scheduling_strategy": "SPREAD"}
    if plan.gpus_per_run:
        opts["num_gpus"] = plan.gpus_per_run
    if plan.resource:
        opts["resources"] = {plan.resource: 1}
    # A run is placed by its GPUs or resource; CPUs are the run's own business then.
    opts["num_cpus"] = 0 if (plan.gpus_per_run or plan.resource) else 1
    return opts


def check_capacity(plan: FleetPlan) -> str | None:
    """Why no node could ever take one of the plan's runs, or None when some node can."""
    import ray  # the optional extra: see `connect`

    total = ray.cluster_resources()
    if plan.gpus_per_run and total.get("GPU", 0) < plan.gpus_per_run:
        return (f"each run asks for {plan.gpus_per_run:g} GPU(s) but the cluster has "
                f"{total.get('GPU', 0):g}; use --resource for nodes without GPUs")
    if plan.resource and total.get(plan.resource, 0) < 1:
        return (f"no node offers the resource {plan.resource!r} (start nodes with "
                f"--resources '{{\"{plan.resource}\": N}}')")
    return None


def _run_on_node(config_json: str, env: dict[str, str]) -> str:
    """The body of a run's Ray task (on the node): see `a2rl.fleet.node.execute`."""
    import ray  # the optional extra: see `connect`

    ctx = ray.get_runtime_context()
    gpus = [str(g) for g in ray.get_gpu_ids()]
    outcome = execute(RunConfig.parse(config_json), env, ctx.get_node_id(), gpus)
    return outcome.model_dump_json()


def submit(config: RunConfig, env: dict[str, str], options: dict[str, Any]) -> Any:
    """Queue one run on the cluster, its config as JSON; returns its Ray object reference."""
    import ray  # the optional extra: see `connect`

    remote = ray.remote(_run_on_node)
    return remote.options(name=f"a2rl-run {run_label(config)}", **options).remote(
        config.node_json(), env)
