"""A Luigi task in a module that an assistant's ``[worker] task_modules`` does not list.

Importing this module appends the importing process's pid to the file named by
:data:`MARKER_VARIABLE`, when that variable is set: a test sets it only for the assistant, to
see that the assistant never imported the module.
"""

from __future__ import annotations

import os

import luigi

MARKER_VARIABLE = "CONVEYOR_LUIGI_TEST_OUTSIDE_MARKER"

if os.environ.get(MARKER_VARIABLE):
    with open(os.environ[MARKER_VARIABLE], "a", encoding="utf-8") as _marker:
        _marker.write(f"{os.getpid()}\n")


class Outside(luigi.Task):
    """Named by a ``TaskParameter`` of ``luigi_tasks_for_tests.Wrapping``."""

    root = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(os.path.join(self.root, "outside.txt"))
