"""What a config decides, built by one function (``build_policy``) from the
config, the process's long-lived part (``addon/runtime/lasting.py``) and the
policy it replaces: upstream pools (their health carried over by id), quotas
(their windows while their settings hold), the failover budget, the nodes'
budgets and fair waits, hedgers (their latency windows while their settings
hold), the cross-checker, the access log, pre-warm demand and the sidecar
client. Nothing here outlives the next reload but what the next policy takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from addon.cache.redis_tier import SharedCacheTier
from addon.chain.demand import Demand
from addon.quota.quotas import Quotas
from addon.redislink.link import RedisLink
from addon.reporting.access_log import AccessLog
from addon.reporting.live_metrics import ACCESS_LOG_DROPPED, CROSS_CHECKS, LiveMetrics
from addon.reporting.sidecar_client import SidecarClient
from addon.runtime.lasting import Lasting
from addon.upstream.admission import BudgetBook
from addon.upstream.batching import UpstreamBatcher
from addon.upstream.budgets import Budgets
from addon.upstream.cross_check import CrossChecker
from addon.upstream.fair_wait import FairWait, lines_for
from addon.upstream.forward import Budget
from addon.upstream.hedge import Hedger
from addon.upstream.pool import Upstream, UpstreamPool
from addon.upstream.shared_budgets import SharedBudgets
from common.config import Config, Endpoint


@dataclass(slots=True)
class Policy:
    config: Config
    pools: dict[str, UpstreamPool]
    ws_pools: dict[str, UpstreamPool]  # node-wss endpoints: for subscriptions
    quotas: Quotas  # the default quota and one per tier
    budget: Budget  # the failover budget: attempts, their timeout, the deadline
    sidecar: SidecarClient
    hedgers: dict[str, Hedger]  # per network
    demand: Demand  # pre-warm (proxy.prewarm): what clients read at every block
    # The nodes' own limits (proxy.upstream_limits; None: switched off)
    budgets: BudgetBook | None = None  # this process's, or the deployment's in Redis
    local_budgets: Budgets | None = None
    fair_waits: dict[str, FairWait] = field(default_factory=dict)  # per network and line
    cross_checker: CrossChecker | None = None  # proxy.cross_check (None: off)
    access_log: AccessLog | None = None  # proxy.access_log (None: off)
    shared_cache: SharedCacheTier | None = None  # with a ``redis:`` section and the cache on
    batcher: UpstreamBatcher | None = None  # proxy.upstream_batching (None: off)


def build_policy(
    config: Config,
    lasting: Lasting,
    previous: Policy | None = None,
    redis: RedisLink | None = None,
) -> Policy:
    """The policy ``config`` decides; what ``previous`` learned is carried
    over where it still applies (upstream health and latency by id, quota
    windows, learned node rates, calls waiting their turn, hedge windows and
    pre-warm demand while their settings hold). ``redis``: the link the
    config's ``redis:`` section uses (``Lasting.link_for``)."""
    p = config.proxy
    clock = lasting.clock
    pools = {
        net: UpstreamPool(
            (Upstream.from_endpoint(e) for e in config.rpc_endpoints(net)),
            eject_after=p.failover.eject_after,
            eject_cooldown_s=p.failover.eject_cooldown_s,
            clock=clock,
            max_backoff_s=p.upstream_limits.max_backoff_s,
        )
        for net in p.networks
    }
    ws_pools = {
        net: UpstreamPool(
            (Upstream.from_endpoint(e) for e in config.endpoints if _wss(e, net)),
            eject_after=p.failover.eject_after,
            eject_cooldown_s=p.failover.eject_cooldown_s,
            clock=clock,
        )
        for net in p.networks
    }
    sidecar = SidecarClient(config.sidecar, passthrough_timeout_s=p.sidecar_timeout_s)
    sidecar.session = lasting.session
    policy = Policy(
        config=config,
        pools=pools,
        ws_pools=ws_pools,
        quotas=Quotas(p.rate_limit, p.tiers, clock=clock),
        budget=Budget(
            max_attempts=p.failover.max_attempts,
            attempt_timeout_s=p.failover.attempt_timeout_s,
            deadline_s=p.failover.deadline_s,
        ),
        sidecar=sidecar,
        hedgers={net: Hedger(p.hedge) for net in p.networks},
        demand=Demand(max_reads=p.prewarm.max_reads, min_clients=p.prewarm.min_clients),
        cross_checker=_cross_checker(config, lasting.metrics),
        access_log=_access_log(config, lasting.metrics),
    )
    if p.upstream_batching.enabled:
        policy.batcher = UpstreamBatcher(
            p.upstream_batching.max_calls, clock, lasting.metrics.count_extra
        )
    if p.upstream_limits.enabled:
        endpoints = [e for net in p.networks for e in config.rpc_endpoints(net)]
        local = Budgets(
            endpoints,
            clock=clock,
            adaptive=p.upstream_limits.adaptive,
            heavy_per_node=p.upstream_limits.heavy_per_node,
            leave_for_probes=True,  # the sidecar's probes of the same nodes
        )
        policy.budgets = policy.local_budgets = local
        for pool in pools.values():
            pool.budget_use = local.use
        policy.fair_waits = lines_for(p.networks)
    if previous is not None:
        _carry_over(policy, previous)
    if redis is not None:
        _share(policy, redis)
    return policy


def _carry_over(policy: Policy, old: Policy) -> None:
    """Live state across a config reload, so routing does not fall back to
    "not probed" for a second."""
    for pools, old_pools in ((policy.pools, old.pools), (policy.ws_pools, old.ws_pools)):
        for net, pool in pools.items():
            if net in old_pools:
                pool.inherit(old_pools[net])
    for net, hedger in old.hedgers.items():
        if net in policy.hedgers and hedger.config == policy.hedgers[net].config:
            policy.hedgers[net] = hedger  # its latency window
    if old.config.proxy.prewarm == policy.config.proxy.prewarm:
        policy.demand = old.demand  # what clients asked lately
    if policy.local_budgets is not None and old.local_budgets is not None:
        policy.local_budgets.inherit(old.local_budgets)  # learned rates, calls in flight
        for net in policy.fair_waits.keys() & old.fair_waits.keys():
            policy.fair_waits[net] = old.fair_waits[net]  # calls waiting stay in line
    policy.quotas.inherit(old.quotas)


def _share(policy: Policy, link: RedisLink) -> None:
    """The quota, the nodes' budgets and the cache shared through ``link``."""
    config = policy.config
    assert config.redis is not None
    policy.quotas.use_redis(link)
    if policy.local_budgets is not None:
        lease_s = config.proxy.failover.attempt_timeout_s
        policy.budgets = SharedBudgets(
            link, policy.local_budgets, lease_s=lease_s, processes=config.redis.processes
        )
    if config.proxy.cache.enabled:
        policy.shared_cache = SharedCacheTier(link, ttl_s=config.redis.cache_ttl_s)


def _cross_checker(config: Config, metrics: LiveMetrics) -> CrossChecker | None:
    p = config.proxy
    if p.cross_check.sample_rate <= 0:
        return None
    return CrossChecker(
        p.cross_check.sample_rate,
        count=lambda net, outcome: metrics.count_extra(CROSS_CHECKS, network=net, outcome=outcome),
        timeout_s=p.failover.attempt_timeout_s,
    )


def _access_log(config: Config, metrics: LiveMetrics) -> AccessLog | None:
    p = config.proxy
    if p.access_log is None:
        return None
    return AccessLog(
        p.access_log,
        client_mode=p.access_log_client,
        on_drop=lambda n: metrics.count_extra(ACCESS_LOG_DROPPED, n),
    )


def _wss(e: Endpoint, network: str) -> bool:
    return e.network == network and e.kind == "node-wss"
