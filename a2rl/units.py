"""Sizes ("16g") and durations ("1h30m") as a user writes them, and the pydantic type that
checks a size when settings load (with the parser the sandbox applies it with)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def parse_size(text: str | int) -> int:
    """Bytes in a size such as "16g", "512m", "100k" or "4096" (0 or "" for no limit)."""
    if isinstance(text, int):
        return text
    value = text.strip().lower().removesuffix("b")
    if not value:
        return 0
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if value[-1] in units:
        return int(float(value[:-1]) * units[value[-1]])
    return int(value)


def parse_duration(text: str) -> float:
    """Seconds in '90', '90s', '20m', '2h', '1h30m' or '1d'."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    if not text:
        raise ValueError("empty duration")
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total, number = total + float(number) * units[ch], ""
        else:
            raise ValueError(f"bad duration {text!r}: use forms like 90s, 20m, 2h, 1h30m")
    if number:
        total += float(number)
    if total <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return total


def _checked_size(value: Any) -> Any:
    """A size is checked when settings load rather than when the first run's sandbox starts
    (a TOML integer is a number of bytes)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        try:
            size = parse_size(value)
        except (ValueError, OverflowError):
            raise ValueError("not a size: use forms like 512m, 16g, 100k or a number of "
                             "bytes") from None
        if size < 0:
            raise ValueError("a size cannot be negative")
    return value


#: a setting that is a size, kept as the user wrote it and parsed where it is applied
Size = Annotated[str, BeforeValidator(_checked_size)]
