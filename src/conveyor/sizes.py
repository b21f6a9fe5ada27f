"""Amounts of memory as people write them: ``"2GiB"``, ``"512 MB"``, ``1048576``.

Binary units (KiB, MiB, GiB, TiB; also K, M, G, T) are powers of 1024, decimal ones (kB, MB,
GB, TB) powers of 1000; a bare number is bytes. :func:`format_size` writes a number of bytes
back in binary units ("2 GiB", "1.5 MiB") for messages.
"""

from __future__ import annotations

import math
import re

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tib": 1024**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
EXPECTED = 'a size such as "2GiB", "512MiB" or "1.5GB", or a number of bytes'


def parse_size(value: int | str) -> int:
    """``value`` in bytes: an int as is, a string with an optional unit; ValueError naming the
    unit or shape that is wrong (negative sizes, NaN and booleans are refused too)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size; expected {EXPECTED}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative; expected {EXPECTED}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a size; expected {EXPECTED}")
    match = _SIZE.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a size; expected {EXPECTED}")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(
            f"{value!r} has an unknown unit {unit!r}; expected KiB, MiB, GiB, TiB, kB, MB, GB or TB"
        )
    amount = float(number) * factor
    if not math.isfinite(amount):
        raise ValueError(f"{value!r} is too large")
    return int(amount)


def format_size(size: float) -> str:
    """``size`` bytes in the largest binary unit that keeps it at least 1 ("2 GiB",
    "1.5 MiB", "812 B"), with at most one decimal."""
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            text = f"{amount:.1f}".rstrip("0").rstrip(".") if unit != "B" else f"{amount:.0f}"
            return f"{text} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")
