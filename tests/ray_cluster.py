"""A two-node Ray cluster on this machine for the fleet's tests: a head and a second node, each
offering a custom resource that stands for GPUs, each with its own `$A2RL_HOME`.

Each node is a `ray start --block` process whose environment carries a marker; "killing a
node" SIGKILLs every process carrying that node's marker (raylet, workers, the `a2rl run`
under way and its MCP server), the way a machine that loses power takes all of its processes
at once. Ray is told to notice a dead node within a few seconds instead of thirty.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MARK_VAR = "A2RL_TEST_RAY_NODE"
RESOURCE = "gpu_slot"
# Health checks every 500 ms, three misses: a dead node is declared in about two seconds.
FAST_FAILURE = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
                "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3",
                "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray() -> str:
    return str(Path(sys.executable).parent / "ray")


@dataclass
class Node:
    name: str
    home: Path
    mark: str
    proc: subprocess.Popen[bytes]
    log: Path
    node_id: str = ""


@dataclass
class RayCluster:
    root: Path  # Ray's own files: short, for its unix sockets
    address: str
    nodes: dict[str, Node] = field(default_factory=dict)

    def kill_node(self, name: str) -> int:
        """SIGKILL every process of node `name`; returns how many were killed."""
        return kill_marked(self.nodes[name].mark)

    def stop(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(15)
            kill_marked(node.mark)
        shutil.rmtree(self.root, ignore_errors=True)


def kill_marked(mark: str) -> int:
    needle = f"{MARK_VAR}={mark}".encode()
    killed = 0
    for _ in range(5):  # again, for anything forked while we were killing
        found = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
                    found += 1
        killed += found
        if not found:
            break
        time.sleep(0.2)
    return killed


def _start_node(root: Path, name: str, home: Path, args: list[str], env: dict[str, str]) -> Node:
    mark = secrets.token_hex(8)
    log = root / f"{name}.log"
    # The node's temporary folder in ours: what a killed node's processes left there (the
    # fleet's folder for a run's output) goes with it in `stop`, not into /tmp for good.
    tmp = root / f"tmp-{name}"
    tmp.mkdir()
    node_env = {**env, **FAST_FAILURE, MARK_VAR: mark, "A2RL_HOME": str(home), "TMPDIR": str(tmp)}
    argv = [_ray(), "start", "--block", "--num-cpus", "1", "--disable-usage-stats",
            "--dashboard-agent-listen-port", str(_free_port()), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=node_env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return Node(name=name, home=home, mark=mark, proc=proc, log=log)


def _alive_nodes(address: str, env: dict[str, str]) -> list[dict]:
    code = ("import json, sys, ray; ray.init(address=sys.argv[1], log_to_driver=False, "
            "logging_level='error'); print(json.dumps([{'id': n['NodeID'], 'resources': "
            "n['Resources']} for n in ray.nodes() if n['Alive']]))")
    p = subprocess.run([sys.executable, "-c", code, address], env=env, capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        return []
    return json.loads(p.stdout.strip().splitlines()[-1])


def start_cluster(env: dict[str, str], files: Path, slots: int = 2, timeout_s: float = 90.0,
                  model_dir: Path | None = None) -> RayCluster:
    """Head ("a") and second node ("b"), `slots` units of RESOURCE each; homes share secrets
    (every node of a real fleet needs the same hidden-split seeds, see the README) and, given
    `model_dir`, a copy of that built base model (`baseline_seed.seed_base_model`).

    The homes are in `files` (a test's folder: the session's end checks the mounts, loop
    devices and cgroups of the runs made there, a killed node's included); Ray's files and the
    nodes' temporary folders in a short folder of /tmp (unix socket paths are limited) that
    `stop` removes."""
    root = Path(tempfile.mkdtemp(prefix="a2rl-ray-"))
    # Token authentication, as a real cluster should run; `env` is the nodes' and the
    # driver's environment, so the caller's fleet connects with the same token.
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    port = _free_port()
    cluster = RayCluster(root=root, address=f"127.0.0.1:{port}")
    homes = {n: files / f"home-{n}" for n in "ab"}
    for home in homes.values():
        home.mkdir()
    from a2rl.settings import Settings
    from a2rl.tasks import secret_seed

    if model_dir is not None:  # the model and the session home's seeds, first
        from .baseline_seed import seed_base_model

        for home in homes.values():
            seed_base_model(home, model_dir)
    secret_seed(Settings(home=homes["a"]), "arith")  # made here if the session had none
    shutil.copytree(homes["a"] / "secrets", homes["b"] / "secrets", dirs_exist_ok=True)
    resources = json.dumps({RESOURCE: slots, "node_a": 1})
    try:
        cluster.nodes["a"] = _start_node(root, "a", homes["a"], [
            "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
            "--include-dashboard", "false", "--temp-dir", str(root / "ray"),
            "--resources", resources], env)
        deadline = time.monotonic() + timeout_s
        while b"Ray runtime started" not in cluster.nodes["a"].log.read_bytes():
            if time.monotonic() > deadline or cluster.nodes["a"].proc.poll() is not None:
                raise RuntimeError(f"the Ray head did not start: "
                                   f"{cluster.nodes['a'].log.read_text()[-2000:]}")
            time.sleep(0.3)
        cluster.nodes["b"] = _start_node(root, "b", homes["b"], [
            "--address", cluster.address, "--node-ip-address", "127.0.0.1",
            "--resources", json.dumps({RESOURCE: slots, "node_b": 1})], env)
        while True:
            nodes = _alive_nodes(cluster.address, env)
            if len(nodes) == 2:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the second Ray node did not join: "
                                   f"{cluster.nodes['b'].log.read_text()[-2000:]}")
            time.sleep(0.5)
        for n in nodes:
            for name in "ab":
                if f"node_{name}" in n["resources"]:
                    cluster.nodes[name].node_id = n["id"]
    except BaseException:
        cluster.stop()
        raise
    return cluster
