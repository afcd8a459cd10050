"""What the batch validators share (pure): the error they raise, the bound on
counts and the short form of a bad value for a message."""

from __future__ import annotations

from typing import Any

MAX_COUNT = 10**12  # per count on the wire; keeps every SQLite sum far from 2**63


class BatchError(ValueError):
    """A batch that must be refused whole; ``str()`` names what is wrong."""


def show(value: Any) -> str:
    """``repr(value)`` cut to 40 characters: a message never echoes a huge value."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
