"""Scenarios 1, 2, 3 and 7 on the throughput stack: a trivial upstream that
answers at once, so what is measured is the proxy, side by side with bare
mitmdump (no addon), a direct call, lean mode, mitmproxy's own event dispatch,
nginx and (``--before``) another checkout's addon."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bench.context import Context
from bench.measure import (
    BARE,
    BEFORE,
    CP,
    LEAN,
    NGINX,
    PLAIN,
    RPC_PATH,
    Run,
    Target,
    alternate,
    cpu_req,
    errors,
    p50,
    ratio,
    rps,
    summary,
)
from bench.report import Report, f0, f2, f3, tput
from bench.stack import NGINX_STREAM_MODULE, http_json, post_raw, sidecar_section
from bench.trivial_upstream import START_HEIGHT
from chainproxy.supervisor import Child, free_port, wait_http, wait_port
from chainproxy.workers import find_tool, haproxy_argv

MISS_BODY = b'{"jsonrpc":"2.0","id":0,"method":"chain_getHeader","params":[]}'
PLAIN_ROW = "chainproxy with mitmproxy's own dispatch"


def vs_bare(r: Report, what: str, bare: list[Run], name: str, runs: list[Run]) -> float | None:
    """A throughput row against bare mitmdump; the ratio."""
    x = ratio(rps(runs), rps(bare))
    r.row(what, tput("bare", bare), tput(name, runs), f2(x))
    return x


def plain_note(runs: dict[str, list[Run]], show: Callable[[list[Run]], str]) -> str:
    """A goal line's note on mitmproxy's own event dispatch, where it was measured."""
    return f"; with mitmproxy's own event dispatch {show(runs[PLAIN])}" if PLAIN in runs else ""


class Throughput:
    def __init__(self, ctx: Context, before: Path | None = None) -> None:
        self.ctx = ctx
        self.before = before  # another checkout, measured as "chainproxy before"
        self.targets: dict[str, Target] = {}
        self.trivial = ""
        self.config_a: Path | None = None
        self.sidecar_a = ""
        self.pinned_hash = ""

    def start(self) -> None:
        """The trivial upstream, a sidecar, chainproxy (default, lean, mitmproxy's own
        dispatch, the other checkout), bare mitmdump, nginx; all proxies start at once."""
        st, cpus = self.ctx.stack, self.ctx.proxy_cpus
        self.trivial = st.start_trivial(self.ctx.p.wall_limit_s + 60)
        self.targets["direct"] = Target("direct call", self.trivial)
        # scenario 15 opens 32 sockets per run from one address: room for a late close
        self.config_a, self.sidecar_a = st.write_config(
            "trivial",
            [self.trivial],
            data_dir=self.ctx.tmp / "data-a",
            proxy={"websocket": {"max_connections_per_client": 1_000}},
        )
        st.start_sidecar("sidecar-a", self.config_a, self.sidecar_a)
        # the other checkout may predate proxy.websocket's socket cap: its own file
        config_before, _ = st.write_config(
            "trivial-before",
            [self.trivial],
            data_dir=self.ctx.tmp / "data-a",
            top={"sidecar": sidecar_section(int(self.sidecar_a.rsplit(":", 1)[1]))},
        )
        variants: list[tuple[str, str, tuple[str, ...], Path | None]] = [
            ("chainproxy", CP, (), None),
            ("lean", LEAN, ("chainproxy_lean=true",), None),
        ]
        if self.ctx.p.extras:
            variants.append(("plain", PLAIN, ("chainproxy_fast_dispatch=false",), None))
        if self.before is not None:
            variants.append(("before", BEFORE, (), self.before))
        started = []
        for key, name, sets, tree in variants:
            config = self.config_a if tree is None else config_before
            proc, url = st.start_chainproxy(
                key, config, self.sidecar_a, sets=sets, cpus=cpus, wait=False, tree=tree
            )
            started.append((key, name, proc, url))
        bare, bare_url = st.start_bare_mitmdump("bare", self.trivial, cpus=cpus, wait=False)
        for key, name, proc, url in started:
            wait_http(f"{url}/rpc/", proc)
            self.targets[key] = Target(name, url, [proc.pid])
        wait_port(int(bare_url.rsplit(":", 1)[1]), bare)
        self.targets["bare"] = Target(BARE, bare_url, [bare.pid])
        if self.ctx.nginx and self.ctx.p.extras:
            port = self.trivial.rsplit(":", 1)[1]
            proc, nport = st.start_nginx(
                "nginx-ref",
                http=(
                    f"upstream rpc {{ server 127.0.0.1:{port}; keepalive 64; }} "
                    "server { listen 127.0.0.1:{port}; location / { proxy_pass http://rpc; "
                    'proxy_http_version 1.1; proxy_set_header Connection ""; } }'
                ),
                cpus=cpus,
            )
            self.targets["nginx"] = Target(NGINX, f"http://127.0.0.1:{nport}", [proc.pid])
        # a block hash the cache may keep: chain_getHeader(hash) is immutable
        doc = http_json(
            self.trivial,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "chain_getBlockHash",
                "params": [START_HEIGHT - 100],
            },
        )
        self.pinned_hash = doc["result"]
        self.ctx.wait_routes(self.sidecar_a, 1)

    def before_row(
        self,
        what: str,
        runs: dict[str, list[Run]],
        metric: Callable[[list[Run]], float | None],
        unit: str,
    ) -> None:
        """With ``--before``: the same measure for the other checkout, same run."""
        if BEFORE not in runs:
            return
        b, now, bare = metric(runs[BEFORE]), metric(runs[CP]), metric(runs[BARE])
        fmt = f3 if unit == "ms" else f0
        self.ctx.report.row(
            f"before/after, {what}",
            f"before {fmt(b)} {unit} (÷ bare {f2(ratio(b, bare))})",
            f"now {fmt(now)} {unit} (÷ bare {f2(ratio(now, bare))})",
            f2(ratio(now, b)),
        )

    def hit_body(self) -> bytes:
        return json.dumps(
            {"jsonrpc": "2.0", "id": 0, "method": "chain_getHeader", "params": [self.pinned_hash]}
        ).encode()

    def throughput_targets(self, *names: str) -> list[Target]:
        return [self.targets[n] for n in names if n in self.targets]

    # --- scenarios 1, 2, 3 and lean mode --------------------------------------------------

    def miss_path(self) -> None:
        p, r = self.ctx.p, self.ctx.report
        print("\n[1] cache-miss path, 32 connections (+ lean mode, references)", flush=True)
        ts = self.throughput_targets("bare", "chainproxy", "lean", "plain", "before", "nginx")
        runs = alternate(ts, MISS_BODY, 32, p.tput_s, p.reps, p.warm_s)
        bare, cp, lean = runs[BARE], runs[CP], runs[LEAN]
        r1 = vs_bare(r, "1. miss path, c=32: throughput", bare, "chainproxy", cp)
        rl = vs_bare(r, "lean mode, miss path, c=32", bare, "lean", lean)
        if PLAIN in runs:
            vs_bare(r, f"{PLAIN_ROW}, miss", bare, "chainproxy", runs[PLAIN])
        if NGINX in runs:
            vs_bare(r, "reference: nginx, miss path, c=32", bare, "nginx", runs[NGINX])
        errs = sum(errors(v) for v in runs.values())
        r.goal(
            f"Goal 1 (miss path, chainproxy ÷ bare mitmdump ≥ 0.90): {f2(r1)}"
            f"  [{f0(rps(cp))} vs {f0(rps(bare))} req/s; CPU per request "
            f"{f0(cpu_req(cp))} vs {f0(cpu_req(bare))} µs; errors {errs}"
            + plain_note(runs, lambda x: f2(ratio(rps(x), rps(bare))))
            + "]"
        )
        r.goal(
            f"Lean mode (miss path, whole pipeline, ÷ bare mitmdump ≥ 1.5): {f2(rl)}"
            f"  [{f0(rps(lean))} req/s, {f0(cpu_req(lean))} µs CPU/req]"
        )
        if NGINX in runs:
            nx = runs[NGINX]
            r.goal(
                f"Reference: nginx (1 worker, keepalive upstream) ÷ bare mitmdump: "
                f"{f2(ratio(rps(nx), rps(bare)))} ({f0(rps(nx))} req/s, {f0(cpu_req(nx))} µs "
                "CPU/req; its load generator and upstream share the other core)"
            )
        self.before_row("miss path, c=32", runs, rps, "req/s")
        r.data["miss"] = summary(runs)

    def hit_path(self) -> None:
        p, r = self.ctx.p, self.ctx.report
        print("\n[2] cache-hit path, 32 connections", flush=True)
        body = self.hit_body()
        for key in ("chainproxy", "lean", "plain", "before"):
            if key not in self.targets:
                continue
            url = self.targets[key].url + RPC_PATH
            post_raw(url, body)
            status, headers, _ = post_raw(url, body)
            if status != 200 or headers.get("X-Cache") != "HIT":
                print(f"  (warning: {key} did not answer from the cache: {status} {headers})")
        ts = self.throughput_targets("bare", "chainproxy", "lean", "plain", "before")
        runs = alternate(ts, body, 32, p.tput_s, p.reps, p.warm_s)
        bare, cp, lean = runs[BARE], runs[CP], runs[LEAN]
        r2 = vs_bare(r, "2. hit path, c=32: throughput", bare, "chainproxy", cp)
        vs_bare(r, "lean mode, hit path, c=32", bare, "lean", lean)
        if PLAIN in runs:
            vs_bare(r, f"{PLAIN_ROW}, hit", bare, "chainproxy", runs[PLAIN])
        r.goal(
            f"Goal 2 (hit path, chainproxy ÷ bare mitmdump ≥ 1.25): {f2(r2)}"
            f"  [{f0(rps(cp))} vs {f0(rps(bare))} req/s; lean {f2(ratio(rps(lean), rps(bare)))}"
            + plain_note(runs, lambda x: f2(ratio(rps(x), rps(bare))))
            + "]"
        )
        self.before_row("hit path, c=32", runs, rps, "req/s")
        r.data["hit"] = summary(runs)

    def latency(self) -> None:
        p, r = self.ctx.p, self.ctx.report
        print("\n[3] concurrency 1: p50 latency", flush=True)
        ts = self.throughput_targets(
            "direct", "bare", "chainproxy", "lean", "plain", "before", "nginx"
        )
        runs = alternate(ts, MISS_BODY, 1, p.lat_s, p.reps, p.warm_s)
        d, bare, cp, lean = runs["direct call"], runs[BARE], runs[CP], runs[LEAN]

        def added(x: list[Run]) -> float | None:
            a, b = p50(x), p50(bare)
            return None if a is None or b is None else a - b

        def signed(v: float | None) -> str:
            return "n/a" if v is None else f"{v:+.3f} ms"

        r.row(
            "3. c=1: p50 latency, added over bare",
            f"bare {f3(p50(bare), ' ms')}",
            f"chainproxy {f3(p50(cp), ' ms')}",
            signed(added(cp)),
        )
        r.row(
            "c=1: p50 vs a direct call",
            f"direct {f3(p50(d), ' ms')}",
            f"chainproxy {f3(p50(cp), ' ms')}",
            f2(ratio(p50(cp), p50(d))),
        )
        r.row(
            "lean mode, c=1: p50",
            f"bare {f3(p50(bare), ' ms')}",
            f"lean {f3(p50(lean), ' ms')}",
            signed(added(lean)),
        )
        if PLAIN in runs:
            r.row(
                f"{PLAIN_ROW}, c=1",
                f"bare {f3(p50(bare), ' ms')}",
                f"chainproxy {f3(p50(runs[PLAIN]), ' ms')}",
                signed(added(runs[PLAIN])),
            )
        if NGINX in runs:
            r.row(
                "reference: nginx, c=1: p50",
                f"direct {f3(p50(d), ' ms')}",
                f"nginx {f3(p50(runs[NGINX]), ' ms')}",
                f2(ratio(p50(runs[NGINX]), p50(d))),
            )
        r.goal(
            f"Goal 3 (c=1, added p50 over bare mitmdump ≤ 0.5 ms): {signed(added(cp))}"
            f"  [p50 direct {f3(p50(d))}, bare {f3(p50(bare))}, chainproxy {f3(p50(cp))} ms;"
            f" chainproxy ÷ direct = {f2(ratio(p50(cp), p50(d)))}"
            + plain_note(runs, lambda x: signed(added(x)))
            + "]"
        )
        self.before_row("c=1, p50", runs, p50, "ms")
        r.data["c1"] = summary(runs)

    # --- scenario 7: two processes behind a TCP balancer ----------------------------------

    def balancer(self, ports: list[int]) -> tuple[Child, int, str]:
        """A TCP balancer (round robin per connection) over ``ports``: nginx's
        stream module, or HAProxy in TCP mode where nginx is not installed."""
        if self.ctx.nginx and NGINX_STREAM_MODULE.exists():
            servers = " ".join(f"server 127.0.0.1:{x};" for x in ports)
            lb, lport = self.ctx.stack.start_nginx(
                "nginx-tcp-balancer",
                stream=f"upstream cps {{ {servers} }} server {{ listen 127.0.0.1:{{port}}; "
                "proxy_pass cps; }",
            )
            return lb, lport, "nginx stream"
        tool = find_tool("haproxy")
        if tool is None:
            raise RuntimeError("needs nginx's stream module or HAProxy (make bench-deps)")
        lport = free_port()
        cfg = self.ctx.tmp / "haproxy-tcp-balancer.cfg"
        servers = "\n".join(f"    server s{i} 127.0.0.1:{x}" for i, x in enumerate(ports))
        cfg.write_text(
            "global\n    maxconn 4096\n"
            "defaults\n    mode tcp\n    timeout connect 2s\n"
            "    timeout client 60s\n    timeout server 60s\n"
            f"frontend lb\n    bind 127.0.0.1:{lport}\n    default_backend cps\n"
            f"backend cps\n    balance roundrobin\n{servers}\n"
        )
        lb = self.ctx.stack.spawn("haproxy-tcp-balancer", haproxy_argv(tool, cfg))
        wait_port(lport, lb)
        return lb, lport, "HAProxy, TCP mode"

    def scale_out(self) -> None:
        p, r = self.ctx.p, self.ctx.report
        print("\n[7] scale-out: two chainproxy processes behind a TCP balancer", flush=True)
        assert self.config_a is not None
        one = self.targets["chainproxy"]
        proc2, url2 = self.ctx.stack.start_chainproxy(
            "chainproxy-2", self.config_a, self.sidecar_a, cpus=self.ctx.other_cpus
        )
        lb, lport, kind = self.balancer(
            [int(one.url.rsplit(":", 1)[1]), int(url2.rsplit(":", 1)[1])]
        )
        two = Target(
            "two processes + TCP balancer", f"http://127.0.0.1:{lport}", [*one.pids, proc2.pid]
        )
        # the second process is new: let it open its upstream connections first
        warm = p.warm_s if p.smoke else max(2.0, p.warm_s)
        runs = alternate([one, two], MISS_BODY, 32, p.tput_s, p.scale_reps, warm)
        a, b = runs[one.name], runs[two.name]
        rs = ratio(rps(b), rps(a))
        r.row(
            f"7. scale-out, miss path, c=32 ({kind})",
            tput("1 process", a),
            tput("2 processes", b),
            f2(rs),
        )
        r.goal(
            f"Scale-out (2 processes sharing one diskcache, {kind} balancer, ÷ 1 process;"
            f" expect ≤ 2): {f2(rs)}  [{f0(rps(b))} vs {f0(rps(a))} req/s; the second process,"
            " the balancer, the load generator and the upstream share the other core]"
        )
        r.data["scale_out"] = summary(runs)
        proc2.stop()
        lb.stop()
