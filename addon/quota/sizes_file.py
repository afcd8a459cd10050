"""The answer-size table on disk (``data_dir/answer_sizes.json``): read when a
process opens its storage, written when it changed (every ``SAVE_EVERY_S``
and at a stop; ``addon/hooks/keepers.py``). A missing, unreadable or
malformed file is an empty table, logged: sizes are a hint that a few answers
teach again, never a reason to refuse to start. Writes replace the file
atomically, so a crash mid-write leaves the previous table."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from common.atomic_file import write_atomic

log = logging.getLogger("chainproxy")

FILE_NAME = "answer_sizes.json"
SAVE_EVERY_S = 30.0
VERSION = 1


def load_sizes(path: Path) -> dict[str, float]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("answer sizes: %s unreadable (%s): starting with none", path, e)
        return {}
    sizes = doc.get("sizes") if isinstance(doc, dict) and doc.get("version") == VERSION else None
    if not isinstance(sizes, dict):
        log.warning("answer sizes: %s is not a table of version %d: ignored", path, VERSION)
        return {}
    return {
        k: float(v)
        for k, v in sizes.items()
        if isinstance(k, str)
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and v > 0
    }


def save_sizes(path: Path, sizes: dict[str, float]) -> None:
    """Raises OSError (the caller logs it: a full disk loses only a hint)."""
    write_atomic(path, json.dumps({"version": VERSION, "sizes": sizes}))
