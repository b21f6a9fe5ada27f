"""The ``dask`` executor for conveyor: attempts run on a Dask cluster (see docs/executors.md).

Each attempt travels as a :class:`conveyor.protocol.AttemptSpec` and runs on a Dask worker under
:class:`conveyor.attempt.AttemptRunner` (what ``python -m conveyor.attempt`` runs: a supervised
child process; no pickle of tasks), so timeouts, process-tree kills and process death behave as
with the ``subprocess`` executor. Dask never retries or re-runs an attempt: conveyor's scheduler
alone decides. Only conveyor's public API is used.
"""

from __future__ import annotations

from .executor import DaskExecutor

__all__ = ["DaskExecutor"]
