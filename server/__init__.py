"""The MCP server of a2rl: tools, transports, per-run auth and the run (`a2rl.server.run`).

Names are loaded on first use: the tools import `a2rl.server.run.clock`, and importing this
package must not drag the MCP app (which imports the tools) in with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import A2RLServer, build_server
    from .run import create_run, finish_run

_LAZY = {"A2RLServer": ".app", "build_server": ".app", "create_run": ".run",
         "finish_run": ".run"}

__all__ = ["A2RLServer", "build_server", "create_run", "finish_run"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
