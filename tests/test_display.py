"""`a2rl.display.printable`: what a terminal or a page acts on becomes a visible escape,
and honest text (tabs, newlines, accents, CJK, emoji, backslashes) is left as it is."""

from __future__ import annotations

import unicodedata

import pytest

from a2rl.display import printable

HONEST = [
    "python train.py --lr 3e-4\t# tab kept\nsecond line",
    "café, naïve, 日本語, emoji 🚀, Ω",
    r"C:\Users\x\train.py and a regex \d+\s*",
    "Arabic text عربي and Hebrew עברית, no control among them",
    "",
]


@pytest.mark.parametrize("text", HONEST)
def test_honest_text_is_unchanged(text: str) -> None:
    assert printable(text) == text


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2J\x1b[3J\x1b[H", "\\x1b[2J\\x1b[3J\\x1b[H"),
    ("\x1b]52;c;ZWNobyBwd25lZA==\x07", "\\x1b]52;c;ZWNobyBwd25lZA==\\x07"),  # OSC 52
    ("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),  # OSC 0, ended by ST
    ("high flag\rno flags ", "high flag\\rno flags "),  # CR-overwrite
    ("a\x00b\x7fc\x08", "a\\x00b\\x7fc\\x08"),
    ("\x9b2J \x9d52;c;x\x9c \x85", "\\x9b2J \\x9d52;c;x\\x9c \\x85"),  # C1 CSI, OSC, ST, NEL
    ("abc\u202edef\u202c", "abc\\u202edef\\u202c"),
    ("\u2066\u2067\u2068\u2069\u200e\u200f\u061c",
     "\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f\\u061c"),
    ("name\udcff.py", "name\\udcff.py"),  # a surrogateescape'd byte
])
def test_controls_become_escapes(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_no_character_a_terminal_or_page_acts_on_survives() -> None:
    """Every code point: none of the listed classes is left, and nothing else is touched."""
    everything = "".join(chr(c) for c in range(0x110000))
    out = printable(everything)
    left = {ch for ch in out if unicodedata.category(ch) in ("Cc", "Cs")} - {"\t", "\n"}
    assert not left
    bidi = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)),
            *map(chr, range(0x2066, 0x206A))}
    assert not bidi & set(out)
    out.encode("utf-8")  # nothing unencodable left
    # printable ASCII and every other character pass through in order
    assert printable("".join(chr(c) for c in range(0x20, 0x7F))) == "".join(
        chr(c) for c in range(0x20, 0x7F))


def test_one_line_shows_tab_and_newline_too() -> None:
    """A forged head on a line of its own is one line with `\\n` in it."""
    forged = "x\n\x1b[2Jrun r1: no flags\tok\r\n"
    assert printable(forged, one_line=True) == "x\\n\\x1b[2Jrun r1: no flags\\tok\\r\\n"
    assert printable(forged) == "x\n\\x1b[2Jrun r1: no flags\tok\\r\n"


def test_printable_is_idempotent() -> None:
    """Applied at two seams (a renderer and the command's output), text is escaped once."""
    raw = "".join(chr(c) for c in range(0x0, 0x3000))
    once = printable(raw, one_line=True)
    assert printable(once) == once == printable(once, one_line=True)


def test_the_cli_log_lines_show_controls_as_escapes() -> None:
    """A library's log message may quote the agent: the CLI's stderr handler escapes it."""
    import logging

    from a2rl.cli.program import PrintableFormatter

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "bad path %s", ("p\x1b[2J",),
                               None)
    assert PrintableFormatter("%(message)s").format(record) == "bad path p\\x1b[2J"
