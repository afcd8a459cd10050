"""The ``chainproxy`` console script (``chainproxy/cli.py``): ``check-config``
says what a file deploys (and never a secret) or stops with one line naming the
key; ``run``/``demo``/``inspect`` map onto ``python -m chainproxy.launch``;
``version``; and the launcher's own ``--workers`` refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest
from mitmproxy.version import VERSION as MITMPROXY_VERSION

from chainproxy import cli, launch
from common.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
PASSWORD = "s3cret-Redis-pw"
CONSOLE_SCRIPT = Path(sys.executable).parent / "chainproxy"


def _check(capsys: pytest.CaptureFixture[str], path: Path | str) -> tuple[int, str, str]:
    code = cli.main(["check-config", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_names_the_config(summary: str, config: Config) -> None:
    """The summary names every network, its endpoint counts per kind, the rate limit."""
    assert f"{len(config.endpoints)} registry endpoints" in summary
    for net in config.proxy.networks:
        assert f"/rpc/v1/{net}" in summary
        kinds = Counter(e.kind for e in config.endpoints if e.network == net)
        for kind, n in kinds.items():
            assert f"{n} {kind}" in summary, (net, kind, n, summary)
        archive = sum(1 for e in config.endpoints if e.network == net and e.archive)
        if archive:
            assert f"{archive} archive" in summary
    rl = config.proxy.rate_limit
    assert f"Rate limit {rl.requests} units per {rl.window_s:g} s" in summary


# --- check-config: valid files -------------------------------------------------------


@pytest.mark.parametrize("name", ["finney.yaml", "demo.yaml", "subnets.yaml"])
def test_check_config_summarises_the_shipped_configs(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    api_key = "sn19KeyThatMustNotShow0123456789"
    monkeypatch.setenv("SN19_API_KEY", api_key)  # subnets.yaml reads it from the environment
    path = CONFIGS / name
    code, out, err = _check(capsys, path)
    assert code == 0, err
    assert err == ""
    summary = out.strip()
    assert "\n" not in summary, "one paragraph"
    assert summary.startswith(f"{path}: OK.")
    _assert_names_the_config(summary, load_config(path))
    assert "no redis" in summary
    assert api_key not in summary


def test_check_config_counts_for_finney(capsys: pytest.CaptureFixture[str]) -> None:
    """Spelled out once for the default config, so a miscount cannot hide behind
    a helper that counts the same way as the summary."""
    code, out, _ = _check(capsys, CONFIGS / "finney.yaml")
    assert code == 0
    assert "/rpc/v1/finney, /rpc/v1/test" in out
    assert "finney (4 node-rpc, 4 node-wss, 2 archive)" in out
    assert "test (2 node-rpc, 2 node-wss)" in out
    assert "Rate limit 100 units per 60 s per client" in out


def _with_redis(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "redis.yaml"
    base = (CONFIGS / "finney.yaml").read_text(encoding="utf-8")
    path.write_text(base + f'redis:\n  url: "{url}"\n{extra}', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{PASSWORD}@10.0.0.5:6379/0", "redis://10.0.0.5:6379/0"),
        (
            f"rediss://default:{PASSWORD}@redis.internal.example:6380/2",
            "rediss://redis.internal.example:6380/2",
        ),
    ],
)
def test_check_config_shows_the_redis_host_never_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, shown: str
) -> None:
    path = _with_redis(tmp_path, url, '  key_prefix: "cp-eu:"\n')
    code, out, err = _check(capsys, path)
    assert code == 0, err
    assert shown in out
    assert "'cp-eu:'" in out
    assert "no redis" not in out
    assert PASSWORD not in out + err
    assert "default:" not in out


@pytest.mark.parametrize(
    "url", ["${CP_TEST_REDIS_URL}", "redis://:${CP_TEST_REDIS_PASSWORD}@10.0.0.5:6379/0"]
)
def test_check_config_redis_password_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("CP_TEST_REDIS_URL", f"redis://:{PASSWORD}@10.0.0.5:6379/0")
    monkeypatch.setenv("CP_TEST_REDIS_PASSWORD", PASSWORD)
    code, out, err = _check(capsys, _with_redis(tmp_path, url))
    assert code == 0, err
    assert "redis://10.0.0.5:6379/0" in out
    assert PASSWORD not in out + err


# --- check-config: bad files ---------------------------------------------------------


def _bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """(file, the key its one error line must name)."""
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("proxy:\n  rate_limt: {requests: 5}\n", encoding="utf-8")
    bad_yaml = tmp_path / "bad-yaml.yaml"
    bad_yaml.write_text("proxy: [unclosed\n", encoding="utf-8")
    scheme = _with_redis(tmp_path, f"http://:{PASSWORD}@10.0.0.5:6379/0")
    prefix = tmp_path / "prefix.yaml"
    prefix.write_text(
        f'redis: {{url: "redis://:{PASSWORD}@10.0.0.5/0", key_prefix: "a b"}}\n', encoding="utf-8"
    )
    return [
        (unknown, "proxy.rate_limt"),
        (bad_yaml, "(file)"),
        (scheme, "redis.url"),
        (prefix, "redis.key_prefix"),
        (tmp_path / "missing.yaml", "(file)"),
    ]


def test_check_config_bad_files_give_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, key in _bad_files(tmp_path):
        code, out, err = _check(capsys, path)
        assert code == 2, (path, out, err)
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"chainproxy: {path}: config error: {key}: "), lines[0]
        assert PASSWORD not in err


def test_check_config_missing_environment_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SN19_API_KEY", raising=False)
    code, out, err = _check(capsys, CONFIGS / "subnets.yaml")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert "registry.endpoints[6].url" in err and "SN19_API_KEY" in err


# --- the installed console script ----------------------------------------------------


def _script(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if not CONSOLE_SCRIPT.exists():
        pytest.fail(f"{CONSOLE_SCRIPT} is not installed: `pip install -e .` (make does it)")
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )


def test_console_script_check_config(tmp_path: Path) -> None:
    ok = _script("check-config", "configs/finney.yaml")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("configs/finney.yaml: OK.")
    assert "no redis" in ok.stdout and ok.stderr == ""

    redis = _script(
        "check-config",
        str(_with_redis(tmp_path, "${CP_TEST_REDIS_URL}")),
        env_extra={"CP_TEST_REDIS_URL": f"redis://:{PASSWORD}@10.0.0.5:6379/0"},
    )
    assert redis.returncode == 0, redis.stderr
    assert "redis://10.0.0.5:6379/0" in redis.stdout
    assert PASSWORD not in redis.stdout + redis.stderr

    for path, key in _bad_files(tmp_path):
        bad = _script("check-config", str(path))
        assert bad.returncode == 2, (path, bad.stdout, bad.stderr)
        assert bad.stdout == ""
        lines = bad.stderr.splitlines()
        assert len(lines) == 1, bad.stderr  # no traceback
        assert f": config error: {key}: " in lines[0]
        assert PASSWORD not in bad.stderr


def test_console_script_version() -> None:
    done = _script("version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"chainproxy {metadata.version('chainproxy')} ")
    assert f"mitmproxy {MITMPROXY_VERSION}" in done.stdout


# --- version -------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    assert out.startswith(f"chainproxy {metadata.version('chainproxy')} ")
    assert f"mitmproxy {MITMPROXY_VERSION}" in out
    assert "not installed" not in out


# --- run / demo / inspect → python -m chainproxy.launch ------------------------------


def _mapped(*argv: str) -> list[str]:
    return cli._launch_argv(cli._parser().parse_args(list(argv)))


def test_run_maps_onto_the_launcher() -> None:
    assert _mapped("run") == [
        "--config", "configs/finney.yaml", "--workers", "1", "--set", "flow_detail=0",
    ]  # fmt: skip
    # a line per flow when asked for; the demo and mitmweb keep theirs
    assert _mapped("run", "--set", "flow_detail=1")[-2:] == ["--set", "flow_detail=1"]
    assert "flow_detail=0" not in _mapped("demo") + _mapped("inspect")
    argv = _mapped(
        "run",
        "--config", "my.yaml",
        "--workers", "4",
        "--listen-host", "::",
        "--listen-port", "9000",
        "--set", "chainproxy_lean=true",
        "--set", "chainproxy_trusted_proxies=10.0.0.0/8",
    )  # fmt: skip
    launched = launch._parser().parse_args(argv)  # the launcher accepts what the CLI passes
    assert launched.config == "my.yaml"
    assert launched.workers == 4
    assert (launched.listen_host, launched.listen_port) == ("::", 9000)
    assert launched.sets == [
        "flow_detail=0",
        "chainproxy_lean=true",
        "chainproxy_trusted_proxies=10.0.0.0/8",
    ]
    assert not launched.simulate and not launched.inspect


def test_demo_maps_onto_the_launcher() -> None:
    argv = _mapped("demo", "--workers", "2", "--set", "a=b")
    launched = launch._parser().parse_args(argv)
    assert launched.config == "configs/demo.yaml"
    assert launched.simulate and not launched.inspect
    assert launched.workers == 2 and launched.sets == ["a=b"]
    # another config for the demo still runs simulated nodes
    assert "--simulate" in _mapped("demo", "--config", "other.yaml")


def test_inspect_maps_onto_the_launcher() -> None:
    launched = launch._parser().parse_args(_mapped("inspect"))
    assert launched.inspect and not launched.simulate
    assert launched.config == "configs/finney.yaml"
    # make inspect CONFIG=configs/demo.yaml: the demo config gets its simulated nodes
    demo = launch._parser().parse_args(_mapped("inspect", "--config", "configs/demo.yaml"))
    assert demo.inspect and demo.simulate


def test_run_calls_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        calls.append(argv)
        return 7

    monkeypatch.setattr(launch, "main", fake_main)
    assert cli.main(["run", "--workers", "3", "--set", "x=y"]) == 7
    launcher = ["--config", "configs/finney.yaml", "--workers", "3"]
    assert calls == [[*launcher, "--set", "flow_detail=0", "--set", "x=y"]]


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["serve"])
    assert info.value.code == 2
    assert "serve" in capsys.readouterr().err


# --- the launcher's --workers refusals (before anything starts) ----------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--workers", "0"], "--workers must be 1..64, got 0"),
        (["--workers", "65"], "--workers must be 1..64, got 65"),
        (["--workers", "2", "--inspect"], "--inspect runs one proxy"),
    ],
)
def test_launch_refuses_bad_workers(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code = launch.main(["--config", str(CONFIGS / "finney.yaml"), *extra])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("chainproxy: ") and needle in lines[0]


def test_cli_run_refuses_bad_workers(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--config", str(CONFIGS / "finney.yaml"), "--workers", "0"])
    assert code == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


@pytest.mark.parametrize("port", ["70000", "0", "-1", "x"])
def test_a_listen_port_out_of_range_is_one_usage_line(
    capsys: pytest.CaptureFixture[str], port: str
) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--config", str(CONFIGS / "finney.yaml"), "--listen-port", port])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--listen-port" in err and "Traceback" not in err


def test_check_config_never_shows_the_sidecar_urls_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "sidecar: {url: 'http://admin:SuperSecretPw1@127.0.0.1:8081'}\nregistry: {endpoints: []}\n",
        encoding="utf-8",
    )
    code, out, err = _check(capsys, path)
    assert code == 0, err
    assert "127.0.0.1:8081" in out and "SuperSecretPw1" not in out + err
