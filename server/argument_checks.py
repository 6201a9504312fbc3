"""Checks every tool's arguments get before the tool runs, each failure a one-line reason.

They sit in `A2RLServer.call_tool` so that no tool can forget one, and they run after the
call is recorded, so a refused call is in the store like any other. What they stop:

- a NUL byte in a string (PostgreSQL cannot store one, and no path or command holds one);
- a lone surrogate (in-memory clients reach here without the JSON-RPC guard);
- a path the kernel would refuse anyway (over PATH_MAX, or a component over NAME_MAX),
  refused before any tool walks it: a megabyte path used to hold the event loop for seconds;
- a call whose arguments together exceed `recording.max_tool_args_bytes`;
- an argument the tool does not take (`unknown_arguments`): the SDK drops them silently, so
  a misspelt `wait` or `timeout` would run the call with the defaults instead of telling the
  agent.

Also here: the one-line-per-field form of argument validation errors, without the
validation library's links.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

PATH_MAX = 4096  # bytes, as Linux counts them (limits.h), the terminating NUL aside
NAME_MAX = 255
PATH_ARGUMENTS = {"path"}
MAX_FIELD_LINES = 10
#: The unknown names a refusal lists (a call may send thousands).
MAX_UNKNOWN_NAMED = 5


def check_arguments(arguments: dict[str, Any], max_bytes: int) -> str | None:
    """None when the arguments may reach the tool; else the reason, one line."""
    total = _keys_size(arguments)
    if total is None:
        return "an argument's name holds a NUL byte or a lone surrogate"
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in arguments.items()]
    while stack:
        name, value = stack.pop()
        if isinstance(value, dict):
            size = _keys_size(value)
            if size is None:
                return f"`{name[:100]}`: a key holds a NUL byte or a lone surrogate"
            total += size
            stack.extend((f"{name}.{k}", v) for k, v in value.items())
            continue
        if isinstance(value, list):
            stack.extend((f"{name}[{i}]", v) for i, v in enumerate(value))
            continue
        if not isinstance(value, str):
            total += 8
            continue
        size = _utf8_len(value)
        label = name[:100]
        if size is None:
            return (f"`{label}`: holds a lone surrogate (an unpaired \\ud800-\\udfff); send "
                    "valid Unicode text")
        if "\x00" in value:
            return (f"`{label}`: holds a NUL byte (\\0 at character {value.index(chr(0))}); no "
                    "command, path or note may contain one")
        total += size
        if name in PATH_ARGUMENTS:
            reason = _path_reason(value, size)
            if reason is not None:
                return f"`{label}`: {reason}"
    if total > max_bytes:
        return (f"the arguments are {total:,} bytes; a call may carry at most {max_bytes:,} "
                "(write large files with a command, e.g. from a script)")
    return None


def unknown_arguments(arguments: dict[str, Any], known: Sequence[str]) -> str | None:
    """None when every argument is one the tool takes; else the reason, one line, naming
    the ones it takes (in the order of its signature)."""
    extra = [str(k) for k in arguments if k not in known]
    if not extra:
        return None
    named = ", ".join(f"`{k[:100]}`" for k in extra[:MAX_UNKNOWN_NAMED])
    if len(extra) > MAX_UNKNOWN_NAMED:
        named += f" and {len(extra) - MAX_UNKNOWN_NAMED:,} more"
    takes = ", ".join(f"`{k}`" for k in known) if known else "no arguments"
    word = "argument" if len(extra) == 1 else "arguments"
    return f"unknown {word} {named}; this tool takes {takes}"


def _keys_size(mapping: dict[Any, Any]) -> int | None:
    """The UTF-8 size of the keys, or None when one holds a NUL byte or a lone surrogate."""
    total = 0
    for key in mapping:
        size = _utf8_len(str(key))
        if size is None or "\x00" in str(key):
            return None
        total += size
    return total


def _path_reason(path: str, size: int) -> str | None:
    if size > PATH_MAX:
        return f"is too long ({size:,} bytes); a path may be at most {PATH_MAX} bytes"
    longest = max((len(part.encode()) for part in path.split("/")), default=0)
    if longest > NAME_MAX:
        return (f"a name in it is too long ({longest:,} bytes); a file or folder name may be "
                f"at most {NAME_MAX} bytes")
    return None


def _utf8_len(text: str) -> int | None:
    """Its UTF-8 size, or None when it holds a lone surrogate (which UTF-8 cannot encode)."""
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None


def validation_message(tool: str, exc: ValidationError) -> str:
    """`exc` as one line per field (`wait_s`: must be a valid number), no links."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        msg = str(err["msg"])
        if msg.startswith("Input should be "):
            msg = "must be " + msg[len("Input should be "):]
        elif msg == "Field required":
            msg = "is required"
        elif msg.startswith("Extra inputs are not permitted"):
            msg = "is not an argument of this tool"
        else:
            msg = msg[:1].lower() + msg[1:]
        lines.append(f"`{loc}`: {msg}")
    if len(lines) > MAX_FIELD_LINES:
        lines[MAX_FIELD_LINES:] = [f"... and {len(lines) - MAX_FIELD_LINES} more"]
    return f"Error executing tool {tool}: invalid arguments\n" + "\n".join(lines)
