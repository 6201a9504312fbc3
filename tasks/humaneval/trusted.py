"""The tests' side: runs the dataset's code only, and its exit status is the verdict.

`check.py` holds the problem's prompt with a stub body (so helpers such as `poly` or
`encode_cyclic` are the dataset's own), then the problem's test. It runs as `__main__` in a
namespace of its own in which both `candidate` and the entry point's name (HumanEval/33's test
calls `sort_third` by name) are `_Candidate`, a proxy: a call sends its arguments to the
candidate's process and turns the reply back into fresh plain values (`wire.py`). Then
`check(candidate)` runs here; the exit status says how it ended:
0 `check` returned, 2 an assertion failed, 3 a call of the candidate failed (it raised, its
process died or went silent, or the reply was refused), 1 anything else.

Arguments the candidate changed in place come back with the reply and are copied into the
caller's own lists, dicts and sets, so a test that looks at an argument after the call sees
what it would have seen in one process. Identity does not cross: a result is never the
argument object itself. Running the comparison over the 164 problems (tests/
test_task_humaneval.py) found no HumanEval test that depends on either.

Stdlib only; shipped after `wire.py`'s source (`grader.py`), hence the names below.
"""

import contextlib
import sys

with contextlib.suppress(ImportError):  # run as a script: wire.py's source precedes this one
    from .wire import WireError, decode, encode, read_frame, write_frame

EXIT_PASSED, EXIT_ERROR, EXIT_ASSERTION, EXIT_CANDIDATE = 0, 1, 2, 3


class CandidateFailed(Exception):  # noqa: N818 (it reads as what happened to the call)
    """A call of the candidate did not return a plain value."""


def _sync(old: object, new: object) -> bool:
    """Make the mutable `old` equal to `new` in place; False when it cannot be (the types
    differ, or `old` is immutable)."""
    if type(old) is not type(new) or type(old) not in (list, dict, set):
        return False
    if type(old) is list:
        if len(old) == len(new):  # type: ignore[arg-type]
            for i, (o, n) in enumerate(zip(old, new, strict=True)):  # type: ignore[call-overload]
                if not _sync(o, n):
                    old[i] = n
        else:
            old[:] = new  # type: ignore[index]
    else:
        old.clear()  # type: ignore[attr-defined]
        old.update(new)  # type: ignore[attr-defined]
    return True


class _Candidate:
    def __init__(self, requests: int, replies: int) -> None:
        self._requests, self._replies = requests, replies

    def __call__(self, *args: object, **kwargs: object) -> object:
        try:
            write_frame(self._requests, encode([list(args), kwargs]))
            payload = read_frame(self._replies)
            if payload is None:
                raise CandidateFailed("the candidate's process ended")
            reply = decode(payload)
        except (OSError, WireError) as exc:
            raise CandidateFailed(f"the call failed: {exc}") from None
        if type(reply) is list and len(reply) == 3 and reply[0] == "ok":
            after = reply[2]
            if after is not None:
                if not (type(after) is list and len(after) == 2 and type(after[0]) is list
                        and len(after[0]) == len(args) and type(after[1]) is dict):
                    raise CandidateFailed("a malformed reply")
                for old, new in zip(args, after[0], strict=True):
                    _sync(old, new)
                for name, old in kwargs.items():
                    _sync(old, after[1].get(name))
            return reply[1]
        if type(reply) is list and len(reply) == 3 and reply[0] == "raised":
            raise CandidateFailed(f"the candidate raised {str(reply[1])[:100]}: "
                                  f"{str(reply[2])[:500]}")
        raise CandidateFailed("a malformed reply")


def main() -> None:
    entry_point, requests, replies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    candidate = _Candidate(requests, replies)
    namespace: dict[str, object] = {"__name__": "__main__"}
    with open(sys.argv[4], encoding="utf-8") as f:
        source = f.read()
    try:
        exec(compile(source, "check.py", "exec"), namespace)
        namespace[entry_point] = candidate
        namespace["check"](candidate)  # type: ignore[operator]
    except CandidateFailed as exc:
        print(f"candidate: {exc}", file=sys.stderr)
        sys.exit(EXIT_CANDIDATE)
    except AssertionError:
        sys.exit(EXIT_ASSERTION)
    except BaseException as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_PASSED)


if __name__ == "__main__":
    main()
