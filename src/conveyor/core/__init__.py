"""The pure core of conveyor: state machine tables and run bookkeeping, without any I/O."""
