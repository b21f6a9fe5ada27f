"""``python -m conveyor``: the command line."""

from .cli import main

raise SystemExit(main())
