"""Write the example's raw input: what the shop's event collector would drop each day.

From the repository root::

    python -m examples.luigi_port.sample --root out/luigi_port --start 2026-11-01 --stop 2026-11-08

writes ``<root>/raw/YYYY/MM/DD/events.jsonl`` for every day from ``--start`` to ``--stop``
(excluded). The content is fixed by the date, so the outputs can be checked: day ``d`` of a month
has ``10 + d`` views, ``d`` carts and ``d // 2`` purchases (:func:`events_of`).
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Sequence
from pathlib import Path

from .pipeline import RawEvents

__all__ = ["events_of", "main", "write_day"]


def events_of(day: datetime.date) -> dict[str, int]:
    """How many events of each type ``day`` has."""
    return {"view": 10 + day.day, "cart": day.day, "purchase": day.day // 2}


def write_day(root: Path, day: datetime.date) -> Path:
    """Write ``day``'s event file under ``root``; return its path."""
    target = RawEvents(root=root, day=day).output()
    moment = datetime.datetime.combine(day, datetime.time(8))
    with target.open("w") as out:
        number = 0
        for kind, count in events_of(day).items():
            for _ in range(count):
                at = moment + datetime.timedelta(minutes=5 * number)
                event = {"ts": at.isoformat(), "type": kind, "user": f"u{number % 13}"}
                out.write(json.dumps(event) + "\n")
                number += 1
    return Path(target.path)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the raw input for every day of ``--start`` .. ``--stop`` (excluded)."""
    parser = argparse.ArgumentParser(prog="python -m examples.luigi_port.sample")
    parser.add_argument("--root", type=Path, required=True, help="the pipeline's root directory")
    parser.add_argument("--start", type=datetime.date.fromisoformat, required=True)
    parser.add_argument("--stop", type=datetime.date.fromisoformat, required=True)
    args = parser.parse_args(argv)
    day = args.start
    while day < args.stop:
        print(write_day(args.root, day))
        day += datetime.timedelta(days=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
