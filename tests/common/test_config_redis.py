"""The ``redis:`` section (a shared quota and cache across processes) and the command-line overrides
the ``--workers`` launcher adds (``common/config/overrides.py``): defaults, one
line naming ``redis.<key>`` per mistake, and a password that never shows."""

from __future__ import annotations

from ipaddress import ip_network
from typing import Any

import pytest

from common.config import Config, ConfigError, parse_config
from common.config.overrides import with_overrides
from tests.common.helpers import assert_one_line_error

PASSWORD = "s3cret-Redis-pw"
URL = f"redis://:{PASSWORD}@10.0.0.5:6379/0"


def _redis(**section: Any) -> dict[str, Any]:
    return {"redis": section}


# --- valid sections ------------------------------------------------------------------


def test_no_section_means_no_redis() -> None:
    assert parse_config({}, {}).redis is None
    assert parse_config({"redis": None}, {}).redis is None  # "redis:" with nothing under it


def test_defaults() -> None:
    r = parse_config(_redis(url="redis://10.0.0.5:6379/0"), {}).redis
    assert r is not None
    assert r.url == "redis://10.0.0.5:6379/0"
    assert r.key_prefix == "chainproxy:"
    assert r.timeout_ms == 50.0
    assert r.cache_ttl_s == 86_400
    assert r.safe_url == "redis://10.0.0.5:6379/0"


def test_explicit_values() -> None:
    r = parse_config(
        _redis(
            url="rediss://default:pw@redis.example:6380/3",
            key_prefix="cp-eu:",
            timeout_ms=5000,
            cache_ttl_s=1,
        ),
        {},
    ).redis
    assert r is not None
    assert (r.key_prefix, r.timeout_ms, r.cache_ttl_s) == ("cp-eu:", 5000.0, 1)
    assert r.url == "rediss://default:pw@redis.example:6380/3"  # the client needs the password
    assert r.safe_url == "rediss://redis.example:6380/3"


@pytest.mark.parametrize("timeout_ms", [1, 1.0, 2.5, 5000])
def test_timeout_bounds_accepted(timeout_ms: float) -> None:
    r = parse_config(_redis(url="redis://h/0", timeout_ms=timeout_ms), {}).redis
    assert r is not None and r.timeout_ms == float(timeout_ms)


def test_url_from_the_environment() -> None:
    env = {"CP_REDIS_URL": URL}
    r = parse_config(_redis(url="${CP_REDIS_URL}"), env).redis
    assert r is not None and r.url == URL and r.safe_url == "redis://10.0.0.5:6379/0"


def test_password_from_the_environment() -> None:
    env = {"CP_REDIS_PASSWORD": PASSWORD}
    r = parse_config(_redis(url="redis://:${CP_REDIS_PASSWORD}@10.0.0.5:6379/0"), env).redis
    assert r is not None and r.url == URL


@pytest.mark.parametrize(
    "url",
    [
        URL,
        f"redis://default:{PASSWORD}@10.0.0.5:6379/0",
        f"rediss://:{PASSWORD}@[2001:db8::5]:6380/1",
        f"redis://:{PASSWORD}@10.0.0.5:6379/0?password={PASSWORD}",
        f"redis://:s3cr%2F{PASSWORD}@10.0.0.5/0",  # a '/' in the password, percent-encoded
    ],
)
def test_safe_url_has_no_password(url: str) -> None:
    r = parse_config(_redis(url=url), {}).redis
    assert r is not None
    assert PASSWORD not in r.safe_url
    assert PASSWORD not in repr(r.safe_url)
    assert r.safe_url.startswith(url.split(":", 1)[0] + "://")
    assert "10.0.0.5" in r.safe_url or "[2001:db8::5]" in r.safe_url


# --- one line naming the key ---------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({}, "redis.url"),
        ({"key_prefix": "x:"}, "redis.url"),
        ({"url": ""}, "redis.url"),
        ({"url": 6379}, "redis.url"),
        ({"url": "http://10.0.0.5:6379/0"}, "redis.url"),
        ({"url": "10.0.0.5:6379"}, "redis.url"),
        ({"url": "redis://"}, "redis.url"),
        ({"url": "redis://10.0.0.5:port/0"}, "redis.url"),
        ({"url": "redis://10.0.0.5:70000/0"}, "redis.url"),
        ({"url": "redis://h/0", "key_prefix": ""}, "redis.key_prefix"),
        ({"url": "redis://h/0", "key_prefix": "a b"}, "redis.key_prefix"),
        ({"url": "redis://h/0", "key_prefix": "x" * 65}, "redis.key_prefix"),
        ({"url": "redis://h/0", "key_prefix": 5}, "redis.key_prefix"),
        ({"url": "redis://h/0", "timeout_ms": 0}, "redis.timeout_ms"),
        ({"url": "redis://h/0", "timeout_ms": 0.5}, "redis.timeout_ms"),
        ({"url": "redis://h/0", "timeout_ms": 5001}, "redis.timeout_ms"),
        ({"url": "redis://h/0", "timeout_ms": "50"}, "redis.timeout_ms"),
        ({"url": "redis://h/0", "timeout_ms": True}, "redis.timeout_ms"),
        ({"url": "redis://h/0", "cache_ttl_s": 0}, "redis.cache_ttl_s"),
        ({"url": "redis://h/0", "cache_ttl_s": 1.5}, "redis.cache_ttl_s"),
        ({"url": "redis://h/0", "cache_ttl_s": "1d"}, "redis.cache_ttl_s"),
        ({"url": "redis://h/0", "passwd": "x"}, "redis.passwd"),
        ({"url": "redis://h/0", "timeout": 50}, "redis.timeout"),
    ],
)
def test_bad_value_names_its_key(section: dict[str, Any], key: str) -> None:
    assert_one_line_error(_redis(**section), key)


def test_unknown_key_lists_the_known_ones() -> None:
    message = assert_one_line_error(_redis(url="redis://h/0", prefix="x:"), "redis.prefix")
    assert "unknown key" in message and "key_prefix" in message


@pytest.mark.parametrize("raw", [["redis://h/0"], "redis://h/0", 5])
def test_section_must_be_a_mapping(raw: Any) -> None:
    assert_one_line_error({"redis": raw}, "redis")


def test_missing_environment_variable_names_redis_url() -> None:
    message = assert_one_line_error(
        _redis(url="redis://:${CP_REDIS_PASSWORD}@h:6379/0"), "redis.url"
    )
    assert "CP_REDIS_PASSWORD" in message


# --- the password never appears in an error ------------------------------------------


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"url": f"http://:{PASSWORD}@10.0.0.5:6379/0"}, "redis.url"),
        ({"url": f"redis://:{PASSWORD}@10.0.0.5:port/0"}, "redis.url"),
        ({"url": f"redis://:{PASSWORD}@10.0.0.5:70000/0"}, "redis.url"),
        ({"url": f"redis://:{PASSWORD}@"}, "redis.url"),
        ({"url": f"redis://:{PASSWORD}@[::1/0"}, "redis.url"),
        ({"url": URL, "key_prefix": "a b"}, "redis.key_prefix"),
        ({"url": URL, "timeout_ms": 0}, "redis.timeout_ms"),
        ({"url": URL, "cache_ttl_s": 0}, "redis.cache_ttl_s"),
        ({"url": URL, "pasword": PASSWORD}, "redis.pasword"),
        # unencoded / ? # in the password end the host part early: the parser would read
        # the rest of the password as port, path or query
        ({"url": f"redis://:{PASSWORD}/x@10.0.0.5:6379/0"}, "redis.url"),
        ({"url": f"redis://:x/{PASSWORD}@10.0.0.5:6379/0"}, "redis.url"),
        ({"url": f"redis://user:12/{PASSWORD}@10.0.0.5:6379/0"}, "redis.url"),
        ({"url": f"redis://user:12?{PASSWORD}@10.0.0.5:6379/0"}, "redis.url"),
        ({"url": f"redis://:{PASSWORD}#x@10.0.0.5:6379/0"}, "redis.url"),
        ({"url": f"redis://:12#{PASSWORD}@10.0.0.5:6379/0"}, "redis.url"),
    ],
)
def test_errors_never_show_the_password(section: dict[str, Any], key: str) -> None:
    message = assert_one_line_error(_redis(**section), key)
    assert PASSWORD not in message
    assert "s3cret" not in message


def test_error_from_an_environment_url_never_shows_it() -> None:
    env = {"CP_REDIS_URL": f"http://:{PASSWORD}@10.0.0.5:6379/0"}
    message = assert_one_line_error(_redis(url="${CP_REDIS_URL}"), "redis.url", env)
    assert PASSWORD not in message


def test_password_with_an_at_sign_is_still_a_password() -> None:
    """The last ``@`` ends the userinfo (as in redis-py): ``@`` in a password works."""
    r = parse_config(_redis(url=f"redis://:{PASSWORD}@x@10.0.0.5:6379/0"), {}).redis
    assert r is not None
    assert r.safe_url == "redis://10.0.0.5:6379/0"


# --- with_overrides (the --set options the --workers launcher passes) ----------------


def _config(**raw: Any) -> Config:
    return parse_config(raw, {})


def test_no_overrides_is_the_same_config() -> None:
    cfg = _config(redis={"url": URL, "key_prefix": "cp:"})
    assert with_overrides(cfg, env={}) == cfg
    assert with_overrides(cfg, redis_url="", trusted="  ", env={}) == cfg


def test_redis_url_override_keeps_the_other_redis_keys() -> None:
    cfg = _config(redis={"url": URL, "key_prefix": "cp-eu:", "timeout_ms": 20, "cache_ttl_s": 60})
    out = with_overrides(cfg, redis_url="redis://127.0.0.1:7000/0", env={})
    assert out.redis is not None
    assert out.redis.url == "redis://127.0.0.1:7000/0"
    assert out.redis.safe_url == "redis://127.0.0.1:7000/0"
    assert (out.redis.key_prefix, out.redis.timeout_ms, out.redis.cache_ttl_s) == (
        "cp-eu:",
        20.0,
        60,
    )
    assert out.proxy == cfg.proxy and out.endpoints == cfg.endpoints
    assert cfg.redis is not None and cfg.redis.url == URL  # the original is untouched


def test_redis_url_override_without_a_section_takes_the_defaults() -> None:
    out = with_overrides(_config(), redis_url="redis://127.0.0.1:7000/0", env={})
    assert out.redis is not None
    assert out.redis.url == "redis://127.0.0.1:7000/0"
    assert (out.redis.key_prefix, out.redis.timeout_ms, out.redis.cache_ttl_s) == (
        "chainproxy:",
        50.0,
        86_400,
    )


def test_redis_url_override_expands_the_environment() -> None:
    env = {"CP_REDIS_PASSWORD": PASSWORD}
    out = with_overrides(_config(), redis_url="redis://:${CP_REDIS_PASSWORD}@h:6379/0", env=env)
    assert out.redis is not None and out.redis.url == f"redis://:{PASSWORD}@h:6379/0"
    assert PASSWORD not in out.redis.safe_url


def test_bad_redis_url_override_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        with_overrides(_config(), redis_url=f"http://:{PASSWORD}@h:6379/0", env={})
    assert info.value.key == "redis.url"
    assert PASSWORD not in str(info.value)


def test_trusted_override_is_merged_without_duplicates() -> None:
    cfg = _config(proxy={"trusted_proxies": ["127.0.0.1/32", "10.0.0.0/8"]})
    out = with_overrides(cfg, trusted="127.0.0.1/32, 192.168.0.0/16,,10.0.0.0/8", env={})
    assert out.proxy.trusted_proxies == (
        ip_network("127.0.0.1/32"),
        ip_network("10.0.0.0/8"),
        ip_network("192.168.0.0/16"),
    )
    assert out.proxy.rate_limit == cfg.proxy.rate_limit
    assert cfg.proxy.trusted_proxies == (ip_network("127.0.0.1/32"), ip_network("10.0.0.0/8"))


def test_trusted_override_on_an_empty_list() -> None:
    out = with_overrides(_config(), trusted="127.0.0.1", env={})
    assert out.proxy.trusted_proxies == (ip_network("127.0.0.1/32"),)


@pytest.mark.parametrize("trusted", ["not-a-cidr", "127.0.0.1/32,10.0.0.300", "10.0.0.0/33"])
def test_bad_trusted_override_names_the_option(trusted: str) -> None:
    with pytest.raises(ConfigError) as info:
        with_overrides(_config(), trusted=trusted, env={})
    message = str(info.value)
    assert "\n" not in message
    assert "chainproxy_trusted_proxies" in message
    assert info.value.key.startswith("chainproxy_trusted_proxies")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:6379/0?db=abc", "'db'"),
        ("redis://127.0.0.1:6379/0?socket_timeout=abc", "'socket_timeout'"),
        ("redis://127.0.0.1:6379/notadb", "the database must be a number"),
    ],
)
def test_options_redis_would_refuse_later_are_refused_now(url: str, says: str) -> None:
    """redis-py refuses these only when the proxy connects (a traceback and
    exit 1 after check-config said OK), or reads a named database as 0."""
    with pytest.raises(ConfigError) as e:
        parse_config({"redis": {"url": url}, "registry": {"endpoints": []}}, env={})
    assert e.value.key == "redis.url" and says in str(e.value)
