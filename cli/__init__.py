"""The `a2rl` command line. Thin: each command resolves settings and calls the library.

`--json` prints exactly one JSON document on stdout and nothing else there; progress and
warnings go to stderr. Every error a user can cause is one line on stderr starting `a2rl:`
and a non-zero exit, never a traceback (`errors`), and commands that only read never create
a store (`context.read_store`).

The modules: `program` (the program and its command list), `errors` (the one error policy),
`options` (the options commands share and their parsers), `context` (settings, store,
progress), `output` (JSON and table cells), and a module per group of commands:
`lifecycle` (create, finish, serve, run, demo), `views` (runs, show, report, compare, audit,
view), `fleet`, `info` (tasks, agents, config, alfworld) and `storage` (export, import, gc).
"""

from a2rl.cli.program import app, main

__all__ = ["app", "main"]
