"""A PostgreSQL state store for conveyor's central scheduler (``[server] state_store =
"postgres"``), which several schedulers can share, one of them leading."""
