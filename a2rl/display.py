"""Agent-written text made safe to show: every character a terminal or a page acts on becomes
a visible escape.

A run's record holds what the agent wrote (commands, paths, file names, log lines, error
messages). Shown raw, ESC[2J clears the analyst's screen, ESC[H and a carriage return write
over a line already printed (an audit's high flag), OSC 52 sets the clipboard, OSC 0 retitles
the window, and the bidi controls reorder what a page or a terminal displays. `printable`
turns each such character into the escape Python would write for it (`\\x1b`, `\\x85`,
`\\u202e`), so the text shows exactly which characters it holds and acts on nothing:

- C0 controls (0x00-0x1f) but tab and newline, and DEL (0x7f);
- the carriage return too: it moves the cursor back over a line already shown (the
  "CR-overwrite" trick), so a CRLF file shows `\\r` at each line's end, which is its content;
- C1 controls (0x80-0x9f): 0x9b is a one-byte CSI, 0x9d a one-byte OSC on many terminals;
- the bidi controls: embeddings and overrides U+202A-U+202E, isolates U+2066-U+2069, the
  marks U+200E, U+200F and U+061C;
- lone surrogates (a file name decoded with `surrogateescape`), which cannot be encoded and
  would stop a command with a traceback.

A backslash is kept as it is (paths and code are full of them), so the agent can write the
six characters `\\x1b[2J`: they look like the escape and do what text does, nothing.
Tab and newline are kept, since they only move to a place a later line cannot hide. Where
one line is expected (a table cell, an excerpt quoted under a flag, the command of a job in a
list), a newline would let the text start a line of its own that reads as the program's
(a forged "no flags" head): `one_line=True` shows tab and newline as `\\t` and `\\n` too.

It is applied where text leaves for a screen, not at each call site; new output goes through
one of these seams:
- `a2rl.cli.output.echo` / `write` (every line and document a command prints), `cell` (a
  value inside a line: one line), `a2rl.cli.errors.say_error` (every `a2rl: ...` error) and
  the CLI's log handler (`a2rl.cli.program.PrintableFormatter`);
- `a2rl.audit.cli_view.format_report`: each quoted excerpt, path and finding on one line;
- the pages: the Jinja environment's `finalize` (`analysis.render_html.environment`: the HTML
  report and every viewer page) and the Markdown report's `analysis.md_escape` helpers.
`--json` output is not passed through it: it is written with every non-ASCII character as a
JSON escape (`\\u202e`), exact as data and inert on a terminal.
"""

from __future__ import annotations

import re
from functools import cache

#: (first, last) of each run of characters shown as escapes: C0 but tab and newline, DEL and
#: C1, the bidi marks, embeddings, overrides and isolates, and the surrogates
_RANGES = ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x061C, 0x061C), (0x200E, 0x200F),
           (0x202A, 0x202E), (0x2066, 0x2069), (0xD800, 0xDFFF))
_LINE = ((0x09, 0x0A),)  # tab and newline, with `one_line`


@cache
def _escape(code: int) -> str:
    named = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
    if code in named:
        return named[code]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _pattern(ranges: tuple[tuple[int, int], ...]) -> re.Pattern[str]:
    # A character class and `sub` rather than `str.translate`: a log page of 10 MB is
    # searched in milliseconds, where a per-character table lookup takes half a second.
    return re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                                    for a, b in ranges) + "]")


_ACTIVE, _ACTIVE_OR_LINE = _pattern(_RANGES), _pattern(_RANGES + _LINE)


def _shown(match: re.Match[str]) -> str:
    return _escape(ord(match.group()))


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with every control, bidi and lone surrogate character as a visible escape;
    with `one_line`, tab and newline too."""
    return (_ACTIVE_OR_LINE if one_line else _ACTIVE).sub(_shown, text)
