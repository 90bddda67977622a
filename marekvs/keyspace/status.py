"""Typed statuses: how a keyspace operation ends when it cannot return a value.

An operation raises one of these; it never builds a reply. The commands layer maps each
to Redis's error text (``commands/errors.py``), a gateway could map them to its own codes.
"""

from __future__ import annotations


class KeyspaceError(Exception):
    """Base of every status; ``detail`` carries what the text needs (e.g. a limit)."""

    def __init__(self, detail: object = None):
        super().__init__(detail)
        self.detail = detail


class WrongType(KeyspaceError):
    """The key holds a value of another type."""


class NotInteger(KeyspaceError):
    """The value (or an argument) is not an integer, or out of range."""


class NotFloat(KeyspaceError):
    """The value is not a valid float."""


class Overflow(KeyspaceError):
    """An increment or decrement would overflow."""


class NanOrInf(KeyspaceError):
    """An increment would produce NaN or Infinity."""


class NoSuchKey(KeyspaceError):
    """The key does not exist (where the command requires it)."""


class TooLong(KeyspaceError):
    """The result would exceed proto-max-bulk-len."""
