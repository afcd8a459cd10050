"""The dashboard and API under the proxy's address answer as the sidecar does
(through a real mitmdump): a trailing slash, a HEAD, Metagraphed's exposed
headers; and a request header no HTTP value may hold is a JSON 400, not a
500 and a traceback."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import build_stack
from tests.e2e.http_raw import Raw, port_of

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("passthrough"), ("alpha",))
    try:
        yield s
    finally:
        s.stop()


async def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s, s.request(method, url) as r:
        return r.status, dict(r.headers), await r.read()


@pytest.mark.parametrize(
    "path",
    ["/api/v1/usage/", "/healthz/", "/api/v1/networks/", "/api/v1/usage", "/api/v1/endpoints/"],
)
async def test_a_trailing_slash_is_the_sidecars_to_judge(stack: Stack, path: str) -> None:
    proxied, _, _ = await _get(stack.proxy_url + path)
    direct, _, _ = await _get(stack.sidecar_url + path)
    assert proxied == direct, path


async def test_a_head_says_the_length_a_get_would_have(stack: Stack) -> None:
    path = "/api/v1/providers"
    _, _, body = await _get(stack.proxy_url + path)
    status, head, empty = await _get(stack.proxy_url + path, "HEAD")
    assert status == 200 and empty == b""
    assert int(head["Content-Length"]) == len(body) > 0


async def test_metagraphed_headers_stay_readable_by_a_browser(stack: Stack) -> None:
    _, headers, _ = await _get(stack.proxy_url + "/api/v1/providers?limit=1")
    exposed = {h.strip().lower() for h in headers["Access-Control-Expose-Headers"].split(",")}
    # the sidecar's list (Metagraphed's) and chainproxy's own, each once
    assert {"etag", "link", "x-metagraph-contract-version", "x-metagraph-error-code"} <= exposed
    assert {"x-request-id", "x-ratelimit-remaining"} <= exposed
    listed = [h.strip().lower() for h in headers["Access-Control-Expose-Headers"].split(",")]
    assert len(listed) == len(set(listed))


def test_a_control_character_in_a_header_is_a_json_400(stack: Stack) -> None:
    c = Raw(port_of(stack.proxy_url))
    try:
        c.send(b"GET /api/v1/usage HTTP/1.1\r\nHost: x\r\nAccept: a\x01b\r\n\r\n")
        answer = c.response()
    finally:
        c.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"control character" in body
    assert stack.proxy is not None
    assert "Traceback" not in stack.proxy.output()
