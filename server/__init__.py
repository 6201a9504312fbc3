"""The MCP server of a2rl: tools, transports, per-run auth and run lifecycle."""

from .app import A2RLServer, build_server
from .lifecycle import create_run, finish_run

__all__ = ["A2RLServer", "build_server", "create_run", "finish_run"]
