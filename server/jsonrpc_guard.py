"""The JSON-RPC guard: every message the agent sends gets an answer, even a broken one.

The SDK reads a stdio line or an HTTP body with pydantic's JSON parser and drops what it
cannot parse or validate (stdio logs it, and a client waiting for that id waits forever). The
guard looks at the raw bytes first, with the same parser, and turns each failure into the
JSON-RPC error the specification gives: -32700 for bytes that are not JSON, -32600 for a
batch, a nesting too deep or a message that is not JSON-RPC, -32602 for a lone surrogate.
The id is recovered when it can be, so that the client can match the answer to its request.
A message that passes is handed to the SDK untouched; the SDK parses it the same way and
cannot fail where the guard did not.

A message over the size limit is never held whole: `Oversize` keeps its first bytes (parsed
as a partial document, so the id, the tool's name and every argument up to the stored cap are
read back), its last 4 KB (an id written after the arguments) and its size and sha256. Its
refusal then carries the request's id: without it a client matches no answer to its request
and waits forever (the SDK's stdio client did, for a 20 MB `edit_file`).

Pure functions: the transports answer and record (see transports.py, recording.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pydantic_core
from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

REFUSED_TOOL = "(refused request)"  # the tool name of a refusal that names no tool
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# An id written early in a message that cannot be parsed whole (too deep, truncated).
_EARLY_ID = re.compile(
    rb'^\s*\{(?:[^{}\[\]]*?,)?\s*"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')
# An id written last, after the arguments: `..., "id": 7}` at the end of the message.
_LATE_ID = re.compile(rb',\s*"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")\s*\}\s*$')
TAIL_BYTES = 4096
HEAD_SLACK = 4096  # the envelope and the argument names around the kept values
MESSAGE_KEY = "(message)"  # where a refused message's own size and sha256 are noted
_EARLY_TOOL = re.compile(rb'"method"\s*:\s*"tools/call"[^{}\[\]]*"params"\s*:\s*\{\s*'
                         rb'"name"\s*:\s*"([A-Za-z0-9_\-]{1,200})"')


@dataclass
class Refusal:
    """Why a message was refused, and what of it could be read (for the answer and the record)."""

    code: int
    message: str
    id: str | int | None = None
    tool: str = REFUSED_TOOL
    arguments: dict[str, Any] = field(default_factory=dict)

    cut: dict[str, Any] | None = None  # the whole message's size and sha256, when cut

    def response(self) -> dict[str, Any]:
        """The JSON-RPC error response (one line on stdio, the body over HTTP)."""
        return {"jsonrpc": "2.0", "id": self.id,
                "error": {"code": self.code, "message": self.message}}

    def response_bytes(self) -> bytes:
        return json.dumps(self.response()).encode()


def inspect(raw: bytes) -> Refusal | None:
    """None when the SDK can take `raw` as it is; else the refusal to answer with."""
    return examine(raw)[0]


def examine(raw: bytes) -> tuple[Refusal | None, Any]:
    """`inspect`, and the parsed message when it passes (the HTTP gate reads its method and
    id without parsing it again)."""
    try:
        parsed = pydantic_core.from_json(raw)
    except ValueError as exc:
        return _unparsed(raw, str(exc)), None
    if isinstance(parsed, list):
        return Refusal(INVALID_REQUEST, "Invalid request: JSON-RPC batch arrays are not "
                       "supported; send one message per request", None), None
    try:
        types.jsonrpc_message_adapter.validate_python(parsed, by_name=False)
    except ValidationError as exc:
        return _invalid(parsed, exc), None
    return None, parsed


class Oversize:
    """What is kept of a message over the size limit while the rest of it streams past."""

    def __init__(self, head_bytes: int) -> None:
        self.head_bytes = head_bytes
        self.head = bytearray()
        self.tail = b""
        self.size = 0
        self.digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.digest.update(chunk)
        if len(self.head) < self.head_bytes:
            self.head += chunk[:self.head_bytes - len(self.head)]
        self.tail = (self.tail + chunk[-TAIL_BYTES:])[-TAIL_BYTES:]

    def refusal(self, limit: int) -> Refusal:
        """Invalid request, with the id, the tool and the arguments read from the head."""
        head = bytes(self.head).decode("utf-8", errors="ignore")
        try:
            # A partial document: the value being read when the head ends is kept as far as
            # it goes, and no string in it is longer than the head.
            parsed = pydantic_core.from_json(head, allow_partial="trailing-strings")
        except ValueError:  # a surrogate, nesting past the parser's limit
            parsed = None
        ident, tool, arguments = _id_tool_args(parsed)
        if parsed is None:
            ident = _early_id(self.head)
            early = _EARLY_TOOL.search(self.head[:TAIL_BYTES])
            tool = early.group(1).decode() if early else REFUSED_TOOL
        if ident is None:
            late = _LATE_ID.search(self.tail)
            ident = _id_value(late.group(1)) if late else None
        return Refusal(INVALID_REQUEST, f"Invalid request: the message is over {limit:,} bytes "
                       f"({self.size:,}); write large files with a command, e.g. from a script",
                       ident, tool, arguments,
                       cut={"sha256": self.digest.hexdigest(), "size": self.size})


def _unparsed(raw: bytes, reason: str) -> Refusal:
    """The fast parser refused the bytes; Python's tells a surrogate or a depth from garbage."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Refusal(PARSE_ERROR, f"Parse error: the message is not UTF-8 (byte {exc.start})",
                       _early_id(raw))
    try:
        parsed = json.loads(text)
    except RecursionError:
        tool = _EARLY_TOOL.search(raw[:4096])
        return Refusal(INVALID_REQUEST, "Invalid request: JSON nested too deep (the limit is "
                       "200 levels)", _early_id(raw),
                       tool.group(1).decode() if tool else REFUSED_TOOL)
    except ValueError as exc:
        return Refusal(PARSE_ERROR, f"Parse error: {exc}", _early_id(raw))
    if "recursion limit" in reason:
        ident, tool, _ = _id_tool_args(parsed, with_arguments=False)
        return Refusal(INVALID_REQUEST, "Invalid request: JSON nested too deep (the limit is "
                       "200 levels)", ident, tool)
    where = _surrogate_at(parsed)
    if where is not None:
        return Refusal(INVALID_PARAMS, f"Invalid params: {where} holds a lone surrogate "
                       "(an unpaired \\ud800-\\udfff escape); send valid Unicode text",
                       *_id_tool_args(parsed))
    return Refusal(PARSE_ERROR, f"Parse error: {reason}", *_id_tool_args(parsed))


def _invalid(parsed: Any, exc: ValidationError) -> Refusal:
    ident, tool, arguments = _id_tool_args(parsed)
    if not isinstance(parsed, dict):
        what = "a JSON object"
    elif parsed.get("jsonrpc") != "2.0":
        what = 'an object with "jsonrpc": "2.0"'
    elif "method" not in parsed and "result" not in parsed and "error" not in parsed:
        what = "a request, a notification or a response (no method, result or error)"
    else:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or "message"
        what = f"a valid message (`{loc}`: {first['msg']})"
    return Refusal(INVALID_REQUEST, f"Invalid request: a JSON-RPC 2.0 message must be {what}",
                   ident, tool, arguments)


def _id_tool_args(parsed: Any, with_arguments: bool = True
                  ) -> tuple[str | int | None, str, dict[str, Any]]:
    """The request id, the tool's name and its arguments, as far as they can be read (not
    the arguments of a message too deep to walk by recursion)."""
    if not isinstance(parsed, dict):
        return None, REFUSED_TOOL, {}
    ident = parsed.get("id")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        ident = None
    elif isinstance(ident, str):
        ident = scrub(ident)
    tool, arguments = REFUSED_TOOL, {}
    params = parsed.get("params")
    if parsed.get("method") == "tools/call" and isinstance(params, dict):
        if isinstance(params.get("name"), str):
            tool = scrub(params["name"])[:200]
        if with_arguments and isinstance(params.get("arguments"), dict):
            arguments = scrub(params["arguments"])
    return ident, tool, arguments


def _early_id(raw: bytes) -> str | int | None:
    m = _EARLY_ID.match(raw[:4096])
    return None if m is None else _id_value(m.group(1))


def _id_value(token: bytes) -> str | int | None:
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return scrub(value) if isinstance(value, (str, int)) else None


def _surrogate_at(value: Any, where: str = "the message") -> str | None:
    """Where the first lone surrogate is (`params.arguments.path`), iteratively."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, at = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                return f"`{at}`" if at else where
        elif isinstance(node, dict):
            for k, v in node.items():
                key_at = f"{at}.{k}" if at else str(k)
                if _SURROGATE.search(k):
                    return f"a key of `{at}`" if at else "a key"
                stack.append((v, scrub(key_at)))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))
    return None


def scrub(value: Any) -> Any:
    """`value` with every lone surrogate replaced by U+FFFD, so that it can be stored."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value
