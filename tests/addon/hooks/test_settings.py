"""The Settings addon: a config loaded into a runtime (lazy connections, the body
limit handed to mitmproxy), a bad config refused while the last good one serves,
and a reload keeping routing and quota state."""

from __future__ import annotations

from typing import Any

import pytest
from mitmproxy.test import taddons

from addon.addons import build_addons


def test_settings_addon_loads_the_config_and_forces_lazy_connections(tmp_path: Any) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "registry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:1', provider: p, kind: node-rpc, network: finney}\n"
    )
    from mitmproxy.addons.proxyserver import Proxyserver

    addons = build_addons()
    with taddons.context(Proxyserver(), *addons) as tctx:
        tctx.configure(addons[0], chainproxy_config=str(cfg))
        rt = addons[0].holder.runtime
        assert rt is not None and len(rt.pools["finney"]) == 1
        assert tctx.options.connection_strategy == "lazy"
        # mitmproxy stops reading a body at the JSON-RPC limit (addon/mitm/limits.py)
        assert int(tctx.options.body_size_limit) == rt.config.proxy.max_body_bytes
        # A bad change later is refused and the last good config keeps serving.
        bad = tmp_path / "bad.yaml"
        bad.write_text("proxy: {max_batch: 0}\n")
        from mitmproxy import exceptions

        with pytest.raises(exceptions.OptionsError, match=r"proxy\.max_batch"):
            tctx.configure(addons[0], chainproxy_config=str(bad))
        assert addons[0].holder.runtime is rt


def test_reloading_the_config_keeps_routing_and_quota_state(tmp_path: Any) -> None:
    from mitmproxy.addons.proxyserver import Proxyserver

    body_ = (
        "registry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:1', provider: p, kind: node-rpc, network: finney}\n"
    )
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(body_)
    second.write_text(body_ + "proxy: {max_batch: 50}\n")
    addons = build_addons()
    with taddons.context(Proxyserver(), *addons) as tctx:
        tctx.configure(addons[0], chainproxy_config=str(first))
        rt = addons[0].holder.runtime
        (up,) = rt.pools["finney"].upstreams.values()
        up.tier, up.best, up.finalized, up.ewma_ms = 1, 123, 121, 42.0
        rt.chain.set_heights("finney", 130, 128)
        rt.quotas.decide("1.2.3.4", 7)
        tctx.configure(addons[0], chainproxy_config=str(second))
        new = addons[0].holder.runtime
        assert new is not rt and new.config.proxy.max_batch == 50
        (up2,) = new.pools["finney"].upstreams.values()
        assert (up2.tier, up2.best, up2.finalized, up2.ewma_ms) == (1, 123, 121, 42.0)
        assert new.chain.tips["finney"] == 130 and new.chain.finalized["finney"] == 128
        assert new.quotas.decide("1.2.3.4", 1).remaining == 100 - 8  # type: ignore[union-attr]


def test_sighup_rereads_the_same_file_in_place(tmp_path: Any, caplog: Any) -> None:
    """``Settings.reload`` (the SIGHUP handler): the file changed on disk is
    applied with the live state carried over; a bad one is logged and refused."""
    from mitmproxy.addons.proxyserver import Proxyserver

    body_ = (
        "registry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:1', provider: p, kind: node-rpc, network: finney}\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(body_)
    addons = build_addons()
    settings = addons[0]
    with taddons.context(Proxyserver(), *addons) as tctx:
        tctx.configure(settings, chainproxy_config=str(cfg))
        rt = settings.holder.runtime
        rt.quotas.decide("1.2.3.4", 7)
        settings.reload()  # nothing changed: the same runtime
        assert settings.holder.runtime is rt
        cfg.write_text(body_ + "proxy: {max_batch: 50}\n")
        settings.reload()
        new = settings.holder.runtime
        assert new is not rt and new.config.proxy.max_batch == 50
        assert new.quotas.decide("1.2.3.4", 1, take=False).remaining == 100 - 7  # goes on
        assert new.subs is rt.subs  # one hub: the sockets' subscriptions live on
        cfg.write_text("proxy: {max_batch: 0}\n")
        settings.reload()  # refused: logged, the last good config serves
        assert settings.holder.runtime is new
        assert "proxy.max_batch" in caplog.text and "refused" in caplog.text


def test_sighup_refuses_what_only_a_restart_can_change(tmp_path: Any, caplog: Any) -> None:
    """systemd's ``ExecReload`` signals each process: a file that moves the
    sidecar or ``data_dir`` is refused here as the launcher refuses it (this
    process once reported to a sidecar that was not there, and the sidecar
    kept the old one); nothing of the password in a sidecar URL is logged."""
    from mitmproxy.addons.proxyserver import Proxyserver

    body_ = (
        f"data_dir: {tmp_path / 'data'}\n"
        "registry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:1', provider: p, kind: node-rpc, network: finney}\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(body_)
    addons = build_addons()
    settings = addons[0]
    with taddons.context(Proxyserver(), *addons) as tctx:
        tctx.configure(settings, chainproxy_config=str(cfg))
        rt = settings.holder.runtime
        moved = body_.replace(str(tmp_path / "data"), str(tmp_path / "elsewhere"))
        for text, key in (
            (body_ + "sidecar: {url: 'http://a:Secret9@127.0.0.1:9999'}\n", "sidecar.url"),
            (moved, "data_dir"),
        ):
            cfg.write_text(text)
            settings.reload()
            assert settings.holder.runtime is rt, key
            assert f"{key}: a reload cannot change it" in caplog.text
        assert "Secret9" not in caplog.text
