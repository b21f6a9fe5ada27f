"""The ``dask`` executor for conveyor: attempts run on a Dask cluster (see docs/executors.md).

Each attempt runs on a Dask worker inside a child process started by conveyor's own
``subprocess`` runner (module, family and string parameters; no pickle of tasks), so timeouts,
process-tree kills and process death behave as with the ``subprocess`` executor. Dask never
retries or re-runs an attempt: conveyor's scheduler alone decides.
"""

from __future__ import annotations

from .executor import DaskExecutor

__all__ = ["DaskExecutor"]
