"""``kgrpc-cluster``: the whole training loop on one machine (what ``make demo`` runs)."""
