"""The worker: graph walk, run loop, reporting."""
