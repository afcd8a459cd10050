"""The answer-size table on disk (addon/quota/sizes_file.py) and its keeper
(addon/hooks/keepers.py): what a restart finds, whatever the file holds."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from addon.hooks.keepers import SizesKeeper
from addon.quota.sizes import AnswerSizes
from addon.quota.sizes_file import load_sizes, save_sizes
from addon.rpc.jsonrpc import Call

METAGRAPHS = Call(1, "state_call", ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x"])


def test_a_saved_table_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "answer_sizes.json"
    save_sizes(path, {"state_getKeys": 100_000.0, "state_call:X": 1_048_576.0})
    assert load_sizes(path) == {"state_getKeys": 100_000.0, "state_call:X": 1_048_576.0}
    assert [p.name for p in tmp_path.iterdir()] == ["answer_sizes.json"]  # no temporary left


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{not json",
        "[]",
        '{"version": 99, "sizes": {"a": 1}}',
        '{"version": 1, "sizes": [1, 2]}',
    ],
)
def test_a_file_that_is_not_a_table_is_an_empty_one_logged(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "answer_sizes.json"
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="chainproxy"):
        assert load_sizes(path) == {}
    assert "answer sizes" in caplog.text


def test_only_sane_sizes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "answer_sizes.json"
    doc = {"a": 100_000, "b": -1, "c": "big", "d": True, "e": 1e400, "f": 0, "g": 2.5e5}
    path.write_text(json.dumps({"version": 1, "sizes": doc}).replace("Infinity", "1e400"))
    assert load_sizes(path) == {"a": 100_000.0, "g": 250_000.0}
    assert load_sizes(tmp_path / "missing.json") == {}


def test_a_write_that_fails_leaves_the_previous_table(tmp_path: Path) -> None:
    path = tmp_path / "answer_sizes.json"
    save_sizes(path, {"a": 100_000.0})
    with pytest.raises(TypeError):
        save_sizes(path, {"b": object()})  # type: ignore[dict-item]
    assert load_sizes(path) == {"a": 100_000.0}
    assert [p.name for p in tmp_path.iterdir()] == ["answer_sizes.json"]


def _holder(path: Path | None, sizes: AnswerSizes) -> SimpleNamespace:
    return SimpleNamespace(
        runtime=SimpleNamespace(lasting=SimpleNamespace(sizes_path=path), sizes=sizes)
    )


def test_the_keeper_writes_what_was_learned_once_and_at_the_stop(tmp_path: Path) -> None:
    path = tmp_path / "answer_sizes.json"
    sizes = AnswerSizes()
    keeper = SizesKeeper(_holder(path, sizes))  # type: ignore[arg-type]
    keeper.done()
    assert not path.exists()  # nothing learned: nothing written (a saved table stays)
    sizes.learn(METAGRAPHS, 1_048_576, 65_536)
    due = keeper._due()
    assert due is not None
    keeper._save(*due)
    assert load_sizes(path) == {"state_call:SubnetInfoRuntimeApi_get_all_metagraphs": 1_048_576.0}
    assert keeper._due() is None  # unchanged since
    sizes.learn(METAGRAPHS, 524_288, 65_536)
    keeper.done()
    assert load_sizes(path)["state_call:SubnetInfoRuntimeApi_get_all_metagraphs"] < 1_048_576


def test_the_keeper_logs_a_write_that_fails_and_tries_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gone" / "answer_sizes.json"  # its directory does not exist
    sizes = AnswerSizes()
    sizes.learn(METAGRAPHS, 1_048_576, 65_536)
    keeper = SizesKeeper(_holder(path, sizes))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="chainproxy"):
        keeper.done()
        keeper.done()  # failing still: not logged again
        assert caplog.text.count("cannot write") == 1
        assert keeper._due() is not None  # still due
        path.parent.mkdir()
        keeper.done()
    assert load_sizes(path) != {}
    assert "written again" in caplog.text and "after 2 failed writes" in caplog.text
