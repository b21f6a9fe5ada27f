"""Executors: how an attempt of a task runs (inline, threads, and later child processes)."""
