"""Control for embedders and operators (docs/embedding.md): :func:`~.plan.plan` (a dry run
with reasons), :func:`~.invalidate.invalidate` (remove outputs, downstream too) and
:class:`~.client.Client` (submit, cancel, watch over a central scheduler's HTTP API)."""
