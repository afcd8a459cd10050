"""A real small filesystem to fill up: a tmpfs mounted on a test's directory.

``mount -t tmpfs`` needs root (CAP_SYS_ADMIN); where it is not permitted the
test is skipped with the reason. ``fill`` writes a filler file until the
filesystem has no free block; deleting it gives the space back.
"""

from __future__ import annotations

import errno
import gc
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(directory: Path, size: str = "2m") -> Iterator[Path]:
    """``directory`` (created) with a tmpfs of ``size`` mounted on it, unmounted after."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8): not available here")
    directory.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {r.stderr.strip() or r.returncode}")
    try:
        yield directory
    finally:
        _umount(directory)


def _umount(directory: Path) -> None:
    gc.collect()  # SQLite handles of the test's objects still open on it
    for _ in range(3):
        r = subprocess.run(["umount", str(directory)], capture_output=True, check=False)
        if r.returncode == 0:
            return
        time.sleep(0.2)  # a process may still be closing a file on it
    # Still busy (the captured log records keep a test's objects, and their open
    # files, alive): detach it now; the kernel frees it when the last one closes.
    subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(directory: Path) -> Path:
    """Write ``directory/filler`` until the filesystem has no free block left."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 1 << 12):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path
