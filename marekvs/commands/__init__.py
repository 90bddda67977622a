"""Command families. Each module declares its commands with ``@command(...)`` (metadata
attached to the handler, no registration side effect) and the server builds the one
command table with ``build_table()``."""
