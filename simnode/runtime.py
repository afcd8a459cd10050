"""The simulated chain's runtime (pure): its version answer, its metadata and
what its runtime APIs answer, per spec version, and the upgrade schedule.

Every block runs ``BASE_SPEC`` until an upgrade is scheduled (the
``upgrade_at`` fault): blocks from ``upgrade_at`` on run ``upgrade_spec``, as
if the block before had enacted a ``set_code``. What a runtime answers is a
function of its spec version alone, so replicas with the same schedule agree,
and the blocks before the upgrade keep answering exactly what they did.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SPEC_NAME = "node-subtensor"
BASE_SPEC = 300  # what every block runs without an upgrade
MAX_SPEC = 2**32 - 1  # a u32 in the runtime version
METADATA_BYTES = 4096


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Schedule:
    """One upgrade at block ``at`` to ``spec`` (no upgrade when ``at`` is None)."""

    at: int | None = None
    spec: int = BASE_SPEC + 1

    def spec_at(self, n: int) -> int:
        """The spec version block ``n`` runs."""
        return self.spec if self.at is not None and n >= self.at else BASE_SPEC


def runtime_version(spec: int) -> dict[str, Any]:
    """The ``state_getRuntimeVersion`` answer of a runtime (a fresh dict)."""
    return {
        "specName": SPEC_NAME,
        "implName": SPEC_NAME,
        "authoringVersion": 1,
        "specVersion": spec,
        "implVersion": 1,
        "apis": [],
        "transactionVersion": 1,
        "stateVersion": 1,
    }


@lru_cache(maxsize=8)
def metadata(spec: int = BASE_SPEC) -> str:
    """The runtime's ``state_getMetadata`` answer: "meta" magic, the v14
    marker, then a deterministic body of its own per spec version (the base
    runtime's is the body every earlier simulator answered)."""
    out = ["6d657461", "0e"]
    chunk = "simnode-metadata" if spec == BASE_SPEC else f"simnode-metadata-{spec}"
    produced = 5
    while produced < METADATA_BYTES:
        chunk = _sha(chunk)
        out.append(chunk)
        produced += 32
    return "0x" + "".join(out)


# The heavy runtime APIs answer about as much as on finney (SCALE bytes, sent as
# hex: twice as many characters), so what they cost a node and a client shows.
HEAVY_CALL_BYTES = {
    "SubnetInfoRuntimeApi_get_all_metagraphs": 524_288,  # ~1 MiB of hex
    "SubnetInfoRuntimeApi_get_all_dynamic_info": 98_304,  # ~192 KiB of hex
}


def call_result(method: str, data: str, spec: int = BASE_SPEC) -> str:
    """What runtime API ``method`` answers for ``data`` on a runtime: the same
    on every block of one runtime, another answer on another runtime."""
    salt = "" if spec == BASE_SPEC else f"{spec}:"
    digest = _sha(salt + method + data.lower())
    size = HEAVY_CALL_BYTES.get(method)
    if size is None:
        return "0x" + digest
    return "0x" + (digest * (2 * size // len(digest) + 1))[: 2 * size]
