"""The coordinator daemon (``kgrpc-coordinator``): ingest, storage, models, gating, access."""
