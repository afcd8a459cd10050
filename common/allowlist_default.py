"""The read-only methods the proxy forwards unless the config names its own list.

Writes (``author_*``), subscriptions (need a WebSocket, and hold state), node
administration and methods Substrate marks unsafe (``system_peers``,
``state_getPairs``, ``state_queryStorage``, ``system_dryRun``, ``offchain_*``)
are deliberately absent.
"""

from __future__ import annotations

_CHAIN = (
    "chain_getBlock",
    "chain_getBlockHash",
    "chain_getFinalizedHead",
    "chain_getFinalisedHead",
    "chain_getHead",
    "chain_getHeader",
    "chain_getRuntimeVersion",
)
_STATE = (
    "state_call",
    "state_callAt",
    "state_getKeysPaged",
    "state_getKeysPagedAt",
    "state_getMetadata",
    "state_getReadProof",
    "state_getRuntimeVersion",
    "state_getStorage",
    "state_getStorageAt",
    "state_getStorageHash",
    "state_getStorageHashAt",
    "state_getStorageSize",
    "state_getStorageSizeAt",
    "state_queryStorageAt",
    "state_getChildReadProof",
    "childstate_getStorage",
    "childstate_getStorageHash",
    "childstate_getStorageSize",
    "childstate_getKeysPaged",
)
_SYSTEM = (
    "system_chain",
    "system_chainType",
    "system_health",
    "system_name",
    "system_version",
    "system_properties",
    "system_syncState",
    "system_accountNextIndex",
    "rpc_methods",
    "payment_queryInfo",
    "payment_queryFeeDetails",
)
# Read-only custom RPCs of subtensor (the bittensor SDK calls these).
_SUBTENSOR = (
    "delegateInfo_getDelegates",
    "delegateInfo_getDelegate",
    "delegateInfo_getDelegated",
    "neuronInfo_getNeuronsLite",
    "neuronInfo_getNeuronLite",
    "neuronInfo_getNeurons",
    "neuronInfo_getNeuron",
    "subnetInfo_getSubnetInfo",
    "subnetInfo_getSubnetsInfo",
    "subnetInfo_getSubnetInfo_v2",
    "subnetInfo_getSubnetsInf_v2",
    "subnetInfo_getSubnetHyperparams",
    "subnetInfo_getSubnetHyperparamsV2",
    "subnetInfo_getAllDynamicInfo",
    "subnetInfo_getDynamicInfo",
    "subnetInfo_getAllMetagraphs",
    "subnetInfo_getMetagraph",
    "subnetInfo_getSelectiveMetagraph",
    "subnetInfo_getSubnetState",
    "subnetInfo_getLockCost",
    "stakeInfo_getStakeInfoForColdkey",
    "stakeInfo_getStakeInfoForColdkeys",
    "stakeInfo_getStakeInfoForHotkeyColdkeyNetuid",
    "stakeInfo_getStakeFee",
)

DEFAULT_ALLOWLIST: frozenset[str] = frozenset(_CHAIN + _STATE + _SYSTEM + _SUBTENSOR)
