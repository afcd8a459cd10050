"""Request ids: a client's sane id kept, anything else replaced by a new one
of 16 hex digits, never repeated, and different in each forked worker."""

from __future__ import annotations

import os
import re

from addon.rpc.request_ids import new_request_id, request_id_of

_NEW = re.compile(r"[0-9a-f]{16}")


def test_new_ids_are_16_hex_digits_and_unique() -> None:
    ids = [new_request_id() for _ in range(10_000)]
    assert all(_NEW.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_sane_client_id_is_kept_anything_else_replaced() -> None:
    assert request_id_of("trace-1.2:3_x") == "trace-1.2:3_x"
    for bad in (None, "", "a b", "x\r\nInjected: 1", "é", "a" * 129):
        assert _NEW.fullmatch(request_id_of(bad))


def test_a_forked_worker_draws_other_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, to the parent
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    mine = {new_request_id() for _ in range(1000)}
    assert _NEW.fullmatch(child) and child not in mine
