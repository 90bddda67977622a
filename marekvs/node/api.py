"""The node satisfies the interface the commands use of it (``commands.context.NodeApi``):
checked by mypy (``make lint``) from this one function, and at run time by
tests/unit/test_architecture.py."""

from __future__ import annotations

from marekvs.commands.context import NodeApi
from marekvs.node import Node


def as_api(node: Node) -> NodeApi:
    return node
