"""The name of the variable marking every process the plugin's tests start (a module of its
own: test modules cannot import ``conftest`` when pytest collects several test directories,
each with a ``conftest`` of its own)."""

MARKER_VARIABLE = "CONVEYOR_LUIGI_TEST_MARKER"
