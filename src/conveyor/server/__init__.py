"""The central scheduler server (``conveyor scheduler``; needs the ``server`` extra)."""
