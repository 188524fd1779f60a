"""``kgrpc-worker``: the volunteer's self-play daemon (see docs/worker.md)."""
