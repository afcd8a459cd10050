"""Real header answers of chopsticks 1.5.1 (Rococo Asset Hub from its raw
genesis), shared by the header-hash and wrong-block tests."""

from __future__ import annotations

# Real answers of chopsticks 1.5.1 running Rococo Asset Hub from its raw genesis.
BLOCK_2_HASH = "0xaa0baf408616e5147ab6dffedca2230c82f9c30517e0e3c4e51e952f8beb3dcd"

BLOCK_2_HEADER = {
    "parentHash": "0x929d07dc84c2a680e287dd8f99a42b64376fde855c4c448d032d66c2914bfda5",
    "number": "0x00000002",
    "stateRoot": "0x" + "00" * 32,
    "extrinsicsRoot": "0x27c20cead9aa0da6e0237c95aa7ab4a3fb12b0f457dd1ba5724fb0db8810f828",
    "digest": {"logs": ["0x0661757261208fdaea0800000000"]},
}

# What chopsticks answers for ANY block hash it does not know: its genesis block,
# announced under a placeholder hash (0x45 x 32) that is not its real hash.
PLACEHOLDER = "0x" + "45" * 32

GENESIS_HEADER = {
    "parentHash": PLACEHOLDER,
    "number": "0x00000000",
    "stateRoot": "0x2e6fa4f052b8e1d06c046a4b765a82bed95dddf8b3ecce893794cbf5ad16d075",
    "extrinsicsRoot": "0x03170a2e7597b7b7e3d84c05391d139a62b157e78786d8c082f29dcf4c111314",
    "digest": {"logs": []},
}
