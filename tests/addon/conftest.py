"""Fixtures the tests under tests/addon share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tmpfs import tmpfs


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (skipped where mounting is not permitted), to fill up."""
    with tmpfs(tmp_path / "disk", "2m") as d:
        yield d
