"""A Luigi pipeline ported to conveyor: daily partitions, an external input, a period rollup.

See ``README.md`` here for the commands, and ``docs/migrating-from-luigi.md`` for the Luigi code
this replaces, side by side. The tasks are in :mod:`examples.luigi_port.pipeline`; the raw input
that another system would drop is made by ``python -m examples.luigi_port.sample``.
"""
