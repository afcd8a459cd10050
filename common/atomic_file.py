"""A small file replaced whole: written beside it, then renamed over it, so a
reader (or a crash mid-write) never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """``text`` as ``path``'s content, all or nothing. Raises OSError (a full
    disk); the temporary file never stays behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
