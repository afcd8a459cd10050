"""Scenario 10: Redis scale-out (one quota and cache over N proxies), against
baselines measured in the same run; ratios, never thresholds.

Processes (all children of the run's ``Stack``): the trivial upstream, one
sidecar, one redis-server, and mitmdump + addon as

* ``1 process``: no ``redis:`` (the per-process limiter), core 1;
* ``worker 1`` / ``worker 2``: the same config plus ``redis:`` (the shared
  quota), on core 1 / core 0;
* HAProxy with ``--workers``' own configuration over worker 1 (``1 worker +
  HAProxy``) and over both (``2 workers + HAProxy``), on core 0.

Every process trusts 127.0.0.1's ``X-Forwarded-For`` (as ``--workers`` sets
it up) and wrk (or ``bench/pyload.py --xff``) sends each request from the next
of 10,000 client addresses, so
the identity is the same kind of value behind HAProxy and directly, the
quota (10^9 calls per 60 s) never refuses, and every call still runs the
limiter: a Lua ``EVALSHA`` per request with ``redis:``.

Measures: (a) throughput, c=32, miss path, every target alternately, with the
CPU of each part (proxy processes, HAProxy, Redis) per request; (b) c=1 p50
and CPU per request, with and without ``redis:``; (c) exactness: two fresh
processes sharing one Redis, quota 1,000 per 60 s, one identity firing
more than that over 32 connections; (d) Redis's CPU per quota check against
the number of calls in the client's window; (e) the proxy process's CPU per
quota check, the addon's pipe against redis-py's asyncio client.
"""

from __future__ import annotations

from typing import Any

from bench.context import Context
from bench.redis_client import CHECKS, client_cost
from bench.redis_exact import burst, command_calls, script_cost, window_entries
from bench.redis_stack import (
    IDENTITIES,
    PARTS,
    Side,
    XRun,
    alternate,
    cpu,
    derive_config,
    errors,
    missing_tools,
    p50_us,
    port_of,
    ratio,
    rps,
    start_haproxy,
    start_redis,
    summary,
)
from bench.report import f0, f2
from bench.throughput import MISS_BODY
from chainproxy.supervisor import Child, wait_http

ONE, RED, H1, H2 = "1 process", "1 process + Redis", "1 worker + HAProxy", "2 workers + HAProxy"
EXACT_LIMIT = 1_000
SCRIPT_SIZES = (0, 100, 1_000, 10_000)


class RedisScale:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.skip = missing_tools()
        self.sides: dict[str, Side] = {}
        self.stopped_later: list[Child] = []  # the throughput processes, stopped before (c)
        self.redis: Child | None = None
        self.redis_url = ""
        self.base = self.ctx.tmp / "redis-base.yaml"
        self.sidecar = ""
        self.sent = [0]  # requests sent to processes with redis: (each should be one EVALSHA)
        self.c32: tuple[list[XRun], list[XRun]] = ([], [])  # 1 process, + Redis at c=32

    # --- set-up ------------------------------------------------------------------------

    def start(self) -> None:
        if self.skip:
            return
        st, core1, core0 = self.ctx.stack, self.ctx.proxy_cpus, self.ctx.other_cpus
        trivial = st.start_trivial(self.ctx.p.wall_limit_s + 60)
        self.base, self.sidecar = st.write_config(
            "redis-base",
            [trivial],
            data_dir=self.ctx.tmp / "data-redis",
            proxy={"trusted_proxies": ["127.0.0.1/32"]},
        )
        st.start_sidecar("sidecar-redis", self.base, self.sidecar)
        self.redis, self.redis_url = start_redis(st, "redis-server", core0)
        shared = derive_config(
            self.base, "redis-shared", redis={"url": self.redis_url, "key_prefix": "bench:"}
        )
        started = [
            (ONE, *st.start_chainproxy("r-one", self.base, self.sidecar, cpus=core1, wait=False)),
            ("w1", *st.start_chainproxy("r-w1", shared, self.sidecar, cpus=core1, wait=False)),
            ("w2", *st.start_chainproxy("r-w2", shared, self.sidecar, cpus=core0, wait=False)),
        ]
        for _, proc, url in started:
            wait_http(f"{url}/rpc/", proc)
        (_, one, one_url), (_, w1, w1_url), (_, w2, w2_url) = started
        h1, h1_url = start_haproxy(st, "haproxy-1", [port_of(w1_url)], core0)
        h2, h2_url = start_haproxy(st, "haproxy-2", [port_of(w1_url), port_of(w2_url)], core0)
        r = [self.redis.pid]
        self.sides = {
            ONE: Side(ONE, one_url, {"proxy": [one.pid]}),
            RED: Side(RED, w1_url, {"proxy": [w1.pid], "redis": r}),
            H1: Side(H1, h1_url, {"proxy": [w1.pid], "haproxy": [h1.pid], "redis": r}),
            H2: Side(H2, h2_url, {"proxy": [w1.pid, w2.pid], "haproxy": [h2.pid], "redis": r}),
        }
        self.stopped_later = [one, w1, w2, h1, h2]
        self.ctx.wait_routes(self.sidecar, 1)

    # --- the scenario ------------------------------------------------------------------

    def run(self) -> None:
        r = self.ctx.report
        print("\n[10] Redis scale-out: shared quota, N workers behind HAProxy", flush=True)
        if self.skip:
            r.row("10. Redis scale-out", "n/a", self.skip, "n/a")
            r.goal(f"Redis scale-out: not measured ({self.skip})")
            r.fail(f"not measured: {self.skip}")
            return
        data: dict[str, Any] = {"identities": IDENTITIES}
        before = command_calls(self.redis_url)
        self.throughput(data)
        self.latency(data)
        calls = command_calls(self.redis_url)
        calls = {k: v - before.get(k, 0) for k, v in calls.items() if v > before.get(k, 0)}
        top = {k: calls.get(k, 0) for k in ("evalsha", "mget", "set")}
        r.goal(
            f"Redis commands during 10a-10b: EVALSHA {top['evalsha']:,}, MGET {top['mget']:,},"
            f" SET {top['set']:,} for {self.sent[0]:,} answered requests through processes with"
            f" redis: ({f2(ratio(top['evalsha'], self.sent[0]))} EVALSHA per request; wrk does"
            " not count each connection's last, unanswered request; the miss path's"
            " chain_getHeader is not cacheable, so no MGET/SET)"
        )
        data["redis_commands"] = {"calls": calls, "requests": self.sent[0]}
        for child in self.stopped_later:  # the cores to the exactness check
            child.stop()
        self.exactness(data)
        self.redis_cost(data)
        self.client_cost(data)
        r.data["redis"] = data

    def throughput(self, data: dict[str, Any]) -> None:
        p, r = self.ctx.p, self.ctx.report
        s = self.sides
        warm = 0.0 if p.smoke else max(1.0, p.warm_s)
        runs = alternate([s[ONE], s[RED], s[H1], s[H2]], 32, p.tput_s, p.reps, warm, self.sent)
        one, red, h1, h2 = runs[ONE], runs[RED], runs[H1], runs[H2]

        def t(name: str, x: list[XRun]) -> str:
            parts = ", ".join(
                f"{k} {f0(cpu(x, k))}" for k in PARTS if any(k in q.cpu_us for q in x)
            )
            return f"{name} {f0(rps(x))} req/s (µs CPU/req: {parts})"

        r.row(
            "10a. 2 workers ÷ 1 process, c=32", t(ONE, one), t(H2, h2), f2(ratio(rps(h2), rps(one)))
        )
        r.row(
            "10a. 2 workers ÷ 1 worker, both HAProxy",
            t(H1, h1),
            t(H2, h2),
            f2(ratio(rps(h2), rps(h1))),
        )
        r.row(
            "10a. HAProxy in front, 1 worker", t(RED, red), t(H1, h1), f2(ratio(rps(h1), rps(red)))
        )
        # per core: a worker with a core of its own serves 1e6 / (its µs CPU per request);
        # 1 worker + HAProxy has core 1 alone, worker 2 of the pair shares core 0 with wrk
        alone, paired = ratio(1e6, cpu(h1)), ratio(1e6, cpu(h2))
        base = ratio(1e6, cpu(one))
        side_us = (cpu(h2, "haproxy") or 0) + (cpu(h2, "redis") or 0)
        r.row(
            "10a. per worker core: req per CPU-second",
            f"{ONE} {f0(base)}",
            f"{H1} {f0(alone)}; {H2} {f0(paired)} (+ HAProxy, Redis {f0(side_us)} µs/req)",
            f"{f2(ratio(alone, base))} / {f2(ratio(paired, base))}",
        )
        errs = sum(errors(x) for x in runs.values())
        r.goal(
            f"Redis scale-out, c=32, miss path (2-core machine; worker 2, HAProxy, Redis, wrk and"
            f" the upstream share core 0): 2 workers + HAProxy + Redis ÷ 1 process without Redis"
            f" = {f2(ratio(rps(h2), rps(one)))}, ÷ 1 worker + HAProxy + Redis ="
            f" {f2(ratio(rps(h2), rps(h1)))}  [{f0(rps(h2))} vs {f0(rps(one))} / {f0(rps(h1))}"
            f" req/s; errors {errs}]"
        )
        if alone is not None and paired is not None:
            r.goal(
                f"Per-core projection (1e6 ÷ a worker's µs CPU per request, c=32): a worker core"
                f" serves {f0(alone)} req/s alone on its core, {f0(paired)} in the pair"
                f" ({f2(ratio(alone, base))} / {f2(ratio(paired, base))} of 1 process without"
                f" Redis, {f0(base)}); N workers on N cores ≈ N * {f0(paired)}-{f0(alone)}"
                f" req/s, plus {f0(side_us)} µs of HAProxy + Redis CPU per request"
                f" ({f2(side_us * alone / 1e6)} of a core per busy worker core)"
            )
        data["throughput"] = summary(runs)
        data["per_core"] = {
            "one_process_rps_per_core": base,
            "worker_alone_rps_per_core": alone,
            "worker_paired_rps_per_core": paired,
            "haproxy_redis_us_per_req": side_us,
        }
        self.c32 = (one, red)

    def latency(self, data: dict[str, Any]) -> None:
        p, r = self.ctx.p, self.ctx.report
        s = self.sides
        warm = 0.0 if p.smoke else max(1.0, p.warm_s)
        runs = alternate([s[ONE], s[RED], s[H1]], 1, p.lat_s, p.reps, warm, self.sent)
        one, red, h1 = runs[ONE], runs[RED], runs[H1]
        one32, red32 = self.c32
        added = None if p50_us(red) is None or p50_us(one) is None else p50_us(red) - p50_us(one)
        share32 = None if cpu(red32) is None else 1 - (cpu(one32) or 0) / cpu(red32)
        share1 = None if cpu(red) is None else 1 - (cpu(one) or 0) / cpu(red)
        r.row(
            "10b. limiter in Redis, proxy CPU/req, c=32",
            f"{ONE} {f0(cpu(one32))} µs",
            f"{RED} {f0(cpu(red32))} µs (+ Redis {f0(cpu(red32, 'redis'))} µs)",
            f2(ratio(cpu(red32), cpu(one32))),
        )
        r.row(
            "10b. limiter in Redis, proxy CPU/req, c=1",
            f"{ONE} {f0(cpu(one))} µs",
            f"{RED} {f0(cpu(red))} µs (+ Redis {f0(cpu(red, 'redis'))} µs)",
            f2(ratio(cpu(red), cpu(one))),
        )
        r.row(
            "10b. limiter in Redis, c=1 p50",
            f"{ONE} {f0(p50_us(one))} µs",
            f"{RED} {f0(p50_us(red))} µs; {H1} {f0(p50_us(h1))} µs",
            "n/a" if added is None else f"{added:+.0f} µs",
        )
        pct = lambda x: "n/a" if x is None else f"{100 * x:.1f} %"  # noqa: E731
        r.goal(
            f"Shared limiter's cost (same mitmdump, redis: vs none, miss path): proxy CPU per"
            f" request x{f2(ratio(cpu(red32), cpu(one32)))} at c=32 (share of a request's CPU"
            f" {pct(share32)}), x{f2(ratio(cpu(red), cpu(one)))} at c=1 ({pct(share1)}; the"
            f" issue's goal is ≤ 10 %); p50 at c=1 {f0(p50_us(one))} → {f0(p50_us(red))} µs"
            f" ({'n/a' if added is None else f'{added:+.0f}'} µs); Redis's own CPU"
            f" {f0(cpu(red32, 'redis'))} µs/req at c=32, {f0(cpu(red, 'redis'))} at c=1"
        )
        data["c1"] = summary(runs)
        data["limiter_share"] = {"c32": share32, "c1": share1, "added_p50_us": added}

    def exactness(self, data: dict[str, Any]) -> None:
        p, r, st = self.ctx.p, self.ctx.report, self.ctx.stack
        limit = 100 if p.smoke else EXACT_LIMIT
        cfg = derive_config(
            self.base,
            "redis-exact",
            redis={"url": self.redis_url, "key_prefix": "exact:"},
            rate_limit={"requests": limit, "window_s": 60},
        )
        procs = [
            st.start_chainproxy("r-e1", cfg, self.sidecar, cpus=self.ctx.proxy_cpus, wait=False),
            st.start_chainproxy("r-e2", cfg, self.sidecar, cpus=self.ctx.other_cpus, wait=False),
        ]
        for proc, url in procs:
            wait_http(f"{url}/rpc/", proc)
        urls = [url for _, url in procs]
        rounds = []
        for i in range(1 if p.stats_quick else 3):
            identity = f"198.51.100.{i + 1}"
            b = burst(urls, MISS_BODY, identity=identity, calls=(2 if p.stats_quick else 3) * limit)
            held = window_entries(self.redis_url, f"exact:rl:{limit};w=60:{identity}")
            rounds.append(
                {
                    "identity": identity,
                    "sent": sum(b.statuses.values()) + b.errors,
                    "statuses": dict(b.statuses),
                    "accepted_per_process": [b.accepted.get(u, 0) for u in urls],
                    "errors": b.errors,
                    "seconds": round(b.seconds, 2),
                    "redis_window_entries": held,
                }
            )
        for proc, _ in procs:
            proc.stop()
        acc = [x["statuses"].get(200, 0) for x in rounds]

        def detail(x: dict[str, Any]) -> str:
            st = x["statuses"]
            other = x["errors"] + sum(v for k, v in st.items() if k not in (200, 429))
            per = "+".join(map(str, x["accepted_per_process"]))
            return f"{st.get(200, 0)} ({per}; 429 {st.get(429, 0)}, other {other})"

        r.row(
            f"10c. one identity, quota {limit}/60 s, 2 processes, c=32",
            f"limit {limit}; sent {', '.join(str(x['sent']) for x in rounds)}",
            "accepted " + ", ".join(detail(x) for x in rounds),
            " / ".join(f2(a / limit) for a in acc),
        )
        r.goal(
            f"Quota exactness under load (2 processes, one Redis, 32 connections, one identity,"
            f" {limit} per 60 s): accepted ÷ limit = {', '.join(f2(a / limit) for a in acc)}"
            f" over {len(rounds)} burst(s) of {rounds[0]['sent']} calls"
            f" (~{f0(rounds[0]['sent'] / max(rounds[0]['seconds'], 1e-3))} calls/s); Redis held"
            f" {', '.join(str(x['redis_window_entries']) for x in rounds)} entries"
        )
        data["exactness"] = {"limit": limit, "rounds": rounds}

    def redis_cost(self, data: dict[str, Any]) -> None:
        r = self.ctx.report
        assert self.redis is not None
        budget = 0.01 if self.ctx.p.smoke else 0.3
        cost = script_cost(self.redis_url, self.redis.pid, SCRIPT_SIZES, budget)
        r.row(
            "10d. Redis CPU per quota check vs calls in the window (ratio: largest ÷ 0)",
            f"{f0(cost[0])} µs at 0",
            ", ".join(f"{f0(cost[n])} µs at {n:,}" for n in SCRIPT_SIZES[1:]),
            f2(ratio(cost[SCRIPT_SIZES[-1]], cost[0])),
        )
        r.goal(
            "Redis CPU per quota check (EVALSHA, pipelined) with N calls already in the client's"
            " window: "
            + ", ".join(f"N={n:,}: {f0(cost[n])} µs" for n in SCRIPT_SIZES)
            + " (expired calls are popped once; a check should cost the same at any N)"
        )
        data["script_cost_us"] = {str(k): v for k, v in cost.items()}

    def client_cost(self, data: dict[str, Any]) -> None:
        cost = client_cost(self.redis_url, 320 if self.ctx.p.smoke else CHECKS)
        for c in (1, 32):
            base, ours = cost[f"redis-py c={c}"], cost[f"pipe c={c}"]
            self.ctx.report.row(
                f"10e. proxy CPU per quota check, c={c} (one process, no HTTP)",
                f"redis-py asyncio {f0(base)} µs",
                f"addon/redislink/pipe.py {f0(ours)} µs",
                f2(ratio(ours, base)),
            )
        self.ctx.report.goal(
            "Proxy-side CPU per shared-quota check (addon/redislink/pipe.py vs redis-py's asyncio"
            f" client, same EVALSHA): c=1 {f0(cost['pipe c=1'])} vs {f0(cost['redis-py c=1'])}"
            f" µs, c=32 {f0(cost['pipe c=32'])} vs {f0(cost['redis-py c=32'])} µs"
        )
        data["client_cost_us"] = cost
