"""Markdown for text the agent wrote: it reads as text, never as markup.

Commands, paths, log lines and failure messages come from the agent, and a CommonMark
renderer passes raw HTML through and turns `[x](javascript:...)` into a link. So agent text
goes into the report only through these helpers:

- `text`: inline prose; `<`, `>`, `&` become entities, the characters that start emphasis,
  code, links and images are backslash-escaped, and line breaks become spaces (a line break
  lets the next line start a block: a heading, a fence, a raw HTML block);
- `code`: a code span delimited by a backtick run longer than any inside it (a single
  backtick in a name used to close the span), on one line;
- `fence`: a fenced block whose fence is longer than any backtick run in its lines;
- `cell`: a table cell; `|` is escaped even inside a code span, where GFM tables unescape it.

Code spans and fenced blocks are literal in CommonMark: no entity or escape is decoded there,
so their content is left as it is and the renderer escapes `<`, `>`, `&` itself.

Each helper also shows control and bidi characters as escapes (`a2rl.display.printable`):
neither a terminal showing the raw Markdown nor a page rendering it may act on them, and no
Markdown escape exists for them (a code span keeps a U+202E as it is).
"""

from __future__ import annotations

import re

from a2rl.display import printable

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BACKTICKS = re.compile(r"`+")
_MARKUP = re.compile(r"([\\`*_\[\]~!])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_HTML = re.compile(r"[&<>]")


def one_line(value: object) -> str:
    """`value` on one line, its controls as escapes (every helper below goes through it)."""
    return printable(_LINE_BREAK.sub(" ", str(value)))


def text(value: object) -> str:
    """`value` as inline Markdown that renders as exactly its characters."""
    escaped = _MARKUP.sub(r"\\\1", one_line(value))
    return _HTML.sub(lambda m: _ENTITIES[m.group()], escaped)


def prose(value: str) -> str:
    """A line of generated prose (the narrative): its emphasis is kept, but no HTML and no
    link or image, since an LLM that read the agent's text may repeat it."""
    escaped = _HTML.sub(lambda m: _ENTITIES[m.group()], printable(value))
    return re.sub(r"([\[\]])", r"\\\1", escaped)


def code(value: object) -> str:
    """`value` as a code span, on one line."""
    body = one_line(value)
    longest = max((len(run) for run in _BACKTICKS.findall(body)), default=0)
    ticks = "`" * (longest + 1)
    # CommonMark strips one space from each end of a span that has both, and a backtick
    # at an end would join the delimiter: pad those with a space.
    if body.startswith("`") or body.endswith("`") or (
            body.startswith(" ") and body.endswith(" ") and body.strip()):
        body = f" {body} "
    return f"{ticks}{body or ' '}{ticks}"


def fence(lines: list[str], info: str = "") -> list[str]:
    """`lines` as a fenced code block that none of them can close."""
    longest = max((len(run) for line in lines for run in _BACKTICKS.findall(line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [f"{ticks}{info}", *(one_line(line) for line in lines), ticks]


def cell(markdown: str) -> str:
    """A table cell from Markdown made by the helpers above (or by the report itself)."""
    return one_line(markdown).replace("|", "\\|")
