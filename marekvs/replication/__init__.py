"""Active-active replication over gRPC: log shipping, acks, bootstrap snapshots.

Generated modules live in ``gen/`` (``make proto``; never edited by hand)."""
