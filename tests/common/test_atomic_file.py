"""common/atomic_file.py: a file replaced whole, its temporary never left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.atomic_file import write_atomic


def test_the_file_is_replaced_whole(tmp_path: Path) -> None:
    f = tmp_path / "state.json"
    f.write_text("old")
    write_atomic(f, "new")
    assert f.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    f = tmp_path / "state.json"
    f.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(f, "\udcff")  # not encodable: the write fails midway
    assert f.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
