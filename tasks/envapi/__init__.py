"""The environment API of level-3 tasks: `a2rl_env` is stdlib-only and is also copied into
every interactive workspace as `env/a2rl_env.py` (see docs/level3.md)."""

from . import a2rl_env

__all__ = ["a2rl_env"]
