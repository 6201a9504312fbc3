"""a2rl: an MCP harness that measures whether LLM agents can engineer post-training.

The public API is small: settings, and the subpackages `a2rl.store`, `a2rl.server`,
`a2rl.tools`, `a2rl.tasks`, `a2rl.grading` and `a2rl.clients`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("a2rl-bench")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"

__all__ = ["__version__"]
