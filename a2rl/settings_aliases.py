"""The flat names settings had before they were sections (`docker_memory`,
`A2RL_DOCKER_MEMORY`), kept as deprecated aliases of their new place
(`[sandbox.docker] memory`, `A2RL_SANDBOX__DOCKER__MEMORY`).

A user's config.toml and environment keep working; `load_settings` says once, in one line on
stderr, which names to rename and where to, and `a2rl config migrate` rewrites a config.toml.
Code never uses these names: only the loading of a user's settings does.
"""

from __future__ import annotations

import sys
from typing import Any

_SERVER = ("http_host", "http_port", "http_sessions_per_run", "http_session_idle_s",
           "http_header_timeout_s", "http_body_timeout_s", "http_requests_per_s",
           "http_max_requests_per_run", "http_max_connections_per_run",
           "http_max_requests_per_address", "http_max_connections_per_address",
           "http_max_connections", "http_resume_bytes_per_session", "http_resume_bytes",
           "http_sse_retry_ms")
_RECORDING = ("output_head_bytes", "output_tail_bytes", "revision_max_bytes",
              "revision_run_max_bytes", "revision_exclude", "job_log_keep_bytes",
              "job_log_run_keep_bytes", "tool_arg_keep_bytes", "tool_arg_run_keep_bytes",
              "max_tool_args_bytes", "audit_read_bytes", "stage_keep_bytes", "gpu_sample_s")

#: old flat name -> its place now, as a dotted path of sections and key
FLAT_ALIASES: dict[str, str] = {
    **{name: f"server.{name.removeprefix('http_')}" for name in _SERVER},
    "max_wait_s": "server.max_wait_s", "max_run_threads": "server.max_run_threads",
    **{f"service_{k}": f"server.services.{k}"
       for k in ("max_connections", "requests_per_s", "max_bytes")},
    **{name: f"recording.{name}" for name in _RECORDING},
    "backend": "sandbox.backend", "unsafe_local": "sandbox.local.unsafe",
    "sandbox_uid": "sandbox.uid", "sandbox_disk": "sandbox.disk",
    "sandbox_disk_volume": "sandbox.disk_volume", "sandbox_file_size": "sandbox.file_size",
    "job_log_max_bytes": "sandbox.job_log_max_bytes",
    "sandbox_memory": "sandbox.local.memory", "sandbox_pids_limit": "sandbox.local.pids_limit",
    **{f"docker_{k}": f"sandbox.docker.{k}"
       for k in ("image", "memory", "pids_limit", "cpus", "shm_size")},
    "grading_engine": "grading.engine", "grader_max_new_tokens": "grading.max_new_tokens",
    "grading_pause_cap_fraction": "grading.pause_cap_fraction",
    **{name: f"grading.{name}" for name in (
        "checkpoint_check_memory_gib", "checkpoint_check_timeout_s", "max_pending_grades",
        "submission_checks_per_minute")},
    **{f"judge_{k}": f"judge.{k}"
       for k in ("base_url", "model", "api_key_env", "max_retries", "timeout_s", "concurrency")},
    **{f"narrative_{k}": f"narrative.{k}"
       for k in ("base_url", "model", "api_key_env", "timeout_s")},
    "model_prices": "prices",
}


def env_name(path: str) -> str:
    """The variable of a dotted setting: `sandbox.docker.memory` -> A2RL_SANDBOX__DOCKER__MEMORY."""
    return "A2RL_" + path.upper().replace(".", "__")


def toml_place(path: str) -> str:
    """Where a dotted setting goes in config.toml: `[sandbox.docker] memory`."""
    table, _, key = path.rpartition(".")
    return f"[{table}] {key}" if table else f"{key} (top level)"


def put(tree: dict[str, Any], path: str, value: Any, *, replace: bool = True) -> None:
    """Set `value` at the dotted `path` of nested dicts (kept when `replace` is False and a
    value is there: a section's own spelling wins over the deprecated one)."""
    *tables, key = path.split(".")
    for table in tables:
        tree = tree.setdefault(table, {})
        if not isinstance(tree, dict):
            return  # a bad value of the section itself: validation says so
    if replace or key not in tree:
        tree[key] = value


_said: set[str] = set()


def warn_deprecated(renames: list[tuple[str, str]]) -> None:
    """One line on stderr naming each deprecated name used and its new place; once per
    process for the same names (settings load more than once in a process)."""
    if not renames:
        return
    line = "a2rl: deprecated settings, use " + "; ".join(f"{new} for {old}"
                                                          for old, new in renames)
    if any(not old.startswith("A2RL_") for old, _ in renames):
        line += " (`a2rl config migrate` rewrites config.toml)"
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr, flush=True)
