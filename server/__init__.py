"""The MCP server of a2rl: tools, transports, per-run auth and the run (`a2rl.server.run`).

The server sits above the tools: it builds each run's tool runtime with the run's clock and
its grading pump plugged in (`run.build_runtime`); the tools import nothing from here.
"""

from __future__ import annotations

from .app import A2RLServer, build_server
from .run import create_run, finish_run

__all__ = ["A2RLServer", "build_server", "create_run", "finish_run"]
