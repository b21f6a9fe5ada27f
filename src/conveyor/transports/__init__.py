"""Scheduler transports: how a worker talks to its scheduler."""
