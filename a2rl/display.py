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

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_CONTROLS = (*(c for c in range(0x20) if c not in (0x09, 0x0A)), *range(0x7F, 0xA0))


def _escape(code: int) -> str:
    named = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
    if code in named:
        return named[code]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE: dict[int, str] = {c: _escape(c) for c in (*_CONTROLS, *_BIDI, *range(0xD800, 0xE000))}
_ONE_LINE: dict[int, str] = {**_TABLE, 0x09: _escape(0x09), 0x0A: _escape(0x0A)}


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with every control, bidi and lone surrogate character as a visible escape;
    with `one_line`, tab and newline too."""
    return text.translate(_ONE_LINE if one_line else _TABLE)
