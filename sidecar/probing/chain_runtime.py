"""The chain's runtime (the on-chain code: spec name and version, as
``state_getRuntimeVersion`` answers) each network runs, and its upgrades, as
the head probes see it. (Not the addon's ``Runtime``, the proxy's parts.)

Every head probe of a node endpoint also reads the runtime version of the
node's best block (``state_getRuntimeVersion``, in the same batch as the
header: ``sidecar.probing.probes.node``). A reading counts only from a node
that is healthy and synced: status OK, at most ``max_lag_blocks`` behind the
network's tip (``sidecar.probing.health.chain_heads``), so a node
that is behind or failing never moves the network's runtime.

``ChainRuntimeBook.see`` folds one reading (network, best block, runtime) into the
network's ``NetworkRuntime``:

* the first reading sets the runtime (no upgrade);
* a higher spec version at a block above every block seen on the current
  runtime is an **upgrade**: one log line (``finney: runtime upgrade 300 -> 301 at block
  N``), counted (``chainproxy_runtime_upgrades_total{network}``) and kept as
  the network's ``last_upgrade``. ``block`` is the first best block seen on the
  new runtime, ``after_block`` the last one seen on the old: the upgrade is in
  ``(after_block, block]``, exact when they are consecutive. A later reading
  inside that window (a node a block behind) narrows it;
* any other reading that disagrees (a lower spec version, or a higher one
  below a block seen on the current runtime) is ignored: on one chain the spec
  version only goes up (``frame_system`` refuses a ``set_code`` that lowers
  it), so such a reading comes from a node on a fork, not from the chain.

The state is written through ``ChainRuntimeSink`` (the probe store's SQLite, so a
restart keeps the runtime and the last upgrade; the counter is per process,
as Prometheus counters are). An upgrade while the sidecar was down is seen at
its first reading after the restart. A remembered runtime that the first
reading contradicts at a lower block (the data_dir now watches another
chain) is replaced without counting an upgrade.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from common.config import Config, Endpoint
from sidecar.probing.health import Health, chain_heads
from sidecar.probing.results import NODE_KINDS, ProbeResult

log = logging.getLogger("chainproxy.sidecar.runtime")

SAVE_EVERY_S = 60.0  # the highest block seen is written at most this often


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    """What ``state_getRuntimeVersion`` names: the runtime's spec name and version."""

    spec_name: str
    spec_version: int


@dataclass(frozen=True, slots=True)
class Upgrade:
    old: RuntimeVersion
    new: RuntimeVersion
    block: int  # the first best block seen on the new runtime
    after_block: int | None  # the last best block seen on the old one
    at: float  # unix time it was seen


@dataclass(frozen=True, slots=True)
class NetworkRuntime:
    runtime: RuntimeVersion
    since_block: int | None  # its first block, when it arrived by an upgrade seen here
    seen_block: int  # the highest block seen on it
    seen_at: float
    last_upgrade: Upgrade | None = None


class ChainRuntimeSink(Protocol):
    """Where the book keeps its state (``sidecar.probing.store.Store``)."""

    def load_runtimes(self) -> dict[str, str]: ...

    def save_runtime(self, network: str, state: str) -> None: ...


def counts(
    endpoint: Endpoint, result: ProbeResult, health: Mapping[str, Health], config: Config
) -> bool:
    """Whether a probe's runtime reading speaks for its network: a live node
    probe that read it, from a healthy node within ``max_lag_blocks`` of the tip."""
    if endpoint.kind not in NODE_KINDS or not result.ok:
        return False
    if result.spec_version is None or result.spec_name is None or result.best is None:
        return False
    h = health.get(endpoint.id)
    net = config.networks.get(endpoint.network)
    if h is None or not h.healthy or net is None:
        return False
    tip, _ = chain_heads((e for e in config.endpoints if e.network == endpoint.network), health)
    return tip is not None and tip - result.best <= net.max_lag_blocks


class ChainRuntimeBook:
    """Per network: the runtime of the best blocks, its last upgrade, and the
    upgrades seen by this process."""

    def __init__(
        self,
        config: Config,
        sink: ChainRuntimeSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._sink = sink
        self._clock = clock
        self._state: dict[str, NetworkRuntime] = {}
        self._confirmed: set[str] = set()  # networks read by this process
        self._saved_at: dict[str, float] = {}
        self.upgrades: dict[str, int] = {n: 0 for n in config.networks}
        if sink is not None:
            self._load(sink)

    def _load(self, sink: ChainRuntimeSink) -> None:
        for network, text in sink.load_runtimes().items():
            if network not in self.config.networks:
                continue
            try:
                self._state[network] = from_json(json.loads(text))
            except (ValueError, TypeError, KeyError) as e:
                log.warning("ignoring the unreadable runtime row of %s: %s", network, e)

    def get(self, network: str) -> NetworkRuntime | None:
        return self._state.get(network)

    def observe(
        self, endpoint: Endpoint, result: ProbeResult, health: Mapping[str, Health]
    ) -> Upgrade | None:
        """Fold a probe result in, if it ``counts``; the upgrade it revealed, if any."""
        if not counts(endpoint, result, health, self.config):
            return None
        assert result.best is not None and result.spec_name is not None
        assert result.spec_version is not None
        runtime = RuntimeVersion(result.spec_name, result.spec_version)
        return self.see(endpoint.network, result.best, runtime, result.at)

    def see(self, network: str, block: int, runtime: RuntimeVersion, at: float) -> Upgrade | None:
        """One reading: ``runtime`` at best block ``block`` (rules: the module's doc)."""
        cur = self._state.get(network)
        confirmed = network in self._confirmed
        self._confirmed.add(network)
        if cur is None:
            log.info("%s: runtime %s %d at block %d", network, *_words(runtime), block)
            self._put(network, NetworkRuntime(runtime, None, block, at), save=True)
            return None
        up = cur.last_upgrade
        inside = (
            up is not None
            and block < up.block
            and (up.after_block is None or block > up.after_block)
        )
        if runtime == cur.runtime:
            if inside and up is not None and up.new == runtime:  # the upgrade came earlier
                up = replace(up, block=block)
                self._put(network, replace(cur, since_block=block, last_upgrade=up), save=True)
                log.info(
                    "%s: runtime upgrade to %d seen at block %d",
                    network,
                    up.new.spec_version,
                    block,
                )
            elif block > cur.seen_block:
                self._put(network, replace(cur, seen_block=block, seen_at=at), save=False)
            return None
        if up is not None and runtime == up.old and block < up.block:
            if inside:  # the old runtime still ran there
                self._put(
                    network, replace(cur, last_upgrade=replace(up, after_block=block)), save=True
                )
            return None
        if runtime.spec_version > cur.runtime.spec_version and block > cur.seen_block:
            return self._upgrade(network, cur, runtime, block, at)
        if not confirmed:  # the first reading contradicts what was remembered: another chain
            log.info(
                "%s: runtime %s %d at block %d (the remembered %d is not this chain's)",
                network,
                *_words(runtime),
                block,
                cur.runtime.spec_version,
            )
            self._put(network, NetworkRuntime(runtime, None, block, at), save=True)
        return None

    def _upgrade(
        self, network: str, cur: NetworkRuntime, runtime: RuntimeVersion, block: int, at: float
    ) -> Upgrade:
        upgrade = Upgrade(cur.runtime, runtime, block, cur.seen_block, at)
        self.upgrades[network] = self.upgrades.get(network, 0) + 1
        self._put(network, NetworkRuntime(runtime, block, block, at, upgrade), save=True)
        old, new = cur.runtime, runtime
        names = f"{old.spec_name} " if old.spec_name != new.spec_name else ""
        to = f"{new.spec_name} " if names else ""
        window = (
            ""
            if block - cur.seen_block <= 1
            else f" (on {old.spec_version} at block {cur.seen_block})"
        )
        log.warning(
            "%s: runtime upgrade %s%d -> %s%d at block %d%s",
            network,
            names,
            old.spec_version,
            to,
            new.spec_version,
            block,
            window,
        )
        return upgrade

    def _put(self, network: str, state: NetworkRuntime, *, save: bool) -> None:
        self._state[network] = state
        if self._sink is None:
            return
        now = self._clock()
        if not save and now - self._saved_at.get(network, float("-inf")) < SAVE_EVERY_S:
            return
        self._saved_at[network] = now
        self._sink.save_runtime(network, json.dumps(to_json(state)))


def _words(runtime: RuntimeVersion) -> tuple[str, int]:
    return runtime.spec_name, runtime.spec_version


# ---- the stored form ---------------------------------------------------------------------


def _runtime_json(r: RuntimeVersion) -> dict[str, Any]:
    return {"spec_name": r.spec_name, "spec_version": r.spec_version}


def to_json(state: NetworkRuntime) -> dict[str, Any]:
    up = state.last_upgrade
    return {
        "runtime": _runtime_json(state.runtime),
        "since_block": state.since_block,
        "seen_block": state.seen_block,
        "seen_at": state.seen_at,
        "last_upgrade": None
        if up is None
        else {
            "old": _runtime_json(up.old),
            "new": _runtime_json(up.new),
            "block": up.block,
            "after_block": up.after_block,
            "at": up.at,
        },
    }


def _int(value: Any, what: str, *, null: bool = False) -> Any:
    if value is None and null:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} is not a block number")
    return value


def _time(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is not a time")
    return float(value)


def _runtime(doc: Any) -> RuntimeVersion:
    if not isinstance(doc, dict) or not isinstance(doc.get("spec_name"), str):
        raise ValueError("runtime is not a runtime")
    return RuntimeVersion(doc["spec_name"], _int(doc.get("spec_version"), "spec_version"))


def from_json(doc: Any) -> NetworkRuntime:
    """A stored state, checked field by field (raises ValueError)."""
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    up = doc.get("last_upgrade")
    upgrade = None
    if up is not None:
        if not isinstance(up, dict):
            raise ValueError("last_upgrade is not an object")
        upgrade = Upgrade(
            _runtime(up.get("old")),
            _runtime(up.get("new")),
            _int(up.get("block"), "block"),
            _int(up.get("after_block"), "after_block", null=True),
            _time(up.get("at"), "at"),
        )
    return NetworkRuntime(
        _runtime(doc.get("runtime")),
        _int(doc.get("since_block"), "since_block", null=True),
        _int(doc.get("seen_block"), "seen_block"),
        _time(doc.get("seen_at"), "seen_at"),
        upgrade,
    )
