"""The one pipelined connection to Redis (``addon/redislink/pipe.py``) against a
real redis-server: packing, order, AUTH/SELECT, NOSCRIPT after a restart, a
lost connection, a caller that gives up, and a peer that is not Redis."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from redis import exceptions as redis_errors

from addon.redislink import pipe as pipe_module
from addon.redislink.pipe import RedisPipe, pack
from tests.redis_server import RedisServer


def test_pack_is_resp_arrays_of_bulk_strings() -> None:
    assert pack(("SET", b"k\r\n", 7, 1.5)) == (
        b"*4\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$1\r\n7\r\n$3\r\n1.5\r\n"
    )
    assert pack(("GET", "é")) == b"*2\r\n$3\r\nGET\r\n$2\r\n\xc3\xa9\r\n"
    with pytest.raises(TypeError, match="NoneType"):
        pack(("GET", None))


async def test_a_burst_is_one_write_and_replies_come_back_in_order(
    redis_server: RedisServer,
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=2)
    sets = [pipe.submit("SET", f"k{i}", i) for i in range(300)]
    gets = [pipe.submit("GET", f"k{i}") for i in range(300)]
    assert await asyncio.gather(*sets) == [b"OK"] * 300
    assert await asyncio.gather(*gets) == [str(i).encode() for i in range(300)]
    assert await pipe.submit("MGET", "k1", "nope", "k2") == [b"1", None, b"2"]
    with pytest.raises(redis_errors.ResponseError, match="unknown command"):
        await pipe.submit("NOSUCHCOMMAND")
    assert await pipe.ping() == b"PONG"  # an error reply does not shift the others
    pipe.close()


async def test_password_and_database_from_the_url(redis_server: RedisServer) -> None:
    redis_server.command("CONFIG", "SET", "requirepass", "s3cret")
    base = f"127.0.0.1:{redis_server.port}"
    pipe = RedisPipe(f"redis://:s3cret@{base}/3", connect_timeout_s=2)
    await pipe.submit("SET", "where", "db3")
    other = RedisPipe(f"redis://:s3cret@{base}/0", connect_timeout_s=2)
    assert await other.submit("GET", "where") is None  # SELECT 3 happened on the first
    assert await pipe.submit("GET", "where") == b"db3"
    wrong = RedisPipe(f"redis://:nope@{base}/0", connect_timeout_s=2)
    with pytest.raises(redis_errors.AuthenticationError, match=r"WRONGPASS|invalid"):
        await wrong.submit("GET", "where")
    for p in (pipe, other, wrong):
        p.close()


async def test_a_forgotten_script_is_loaded_again_once(redis_server: RedisServer) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=2)
    sha = pipe.script("return ARGV[1] + 1")
    assert await pipe.submit("EVALSHA", sha, 0, 41) == 42  # first use: NOSCRIPT, load, again
    redis_server.command("SCRIPT", "FLUSH")  # what a restarted Redis looks like
    results = await asyncio.gather(*(pipe.submit("EVALSHA", sha, 0, i) for i in range(5)))
    assert results == [1, 2, 3, 4, 5]
    unknown = "0" * 40  # never registered: the NOSCRIPT error reaches the caller
    with pytest.raises(redis_errors.ResponseError, match="NOSCRIPT"):
        await pipe.submit("EVALSHA", unknown, 0)
    pipe.close()


async def test_a_caller_that_gives_up_does_not_shift_the_replies(
    redis_server: RedisServer,
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=2)
    await pipe.ping()
    slow = pipe.submit("BLPOP", "never", "0.3")  # answered after 0.3 s
    after = pipe.submit("ECHO", "mine")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await slow
    assert await after == b"mine"
    assert await pipe.submit("ECHO", "next") == b"next"
    pipe.close()


async def test_a_lost_connection_fails_the_waiters_and_the_next_call_reconnects(
    redis_server: RedisServer,
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=0.5)
    await pipe.ping()
    waiting = pipe.submit("BLPOP", "never", "5")
    await asyncio.sleep(0.05)
    redis_server.stop()
    with pytest.raises(redis_errors.ConnectionError, match="lost"):
        await waiting
    with pytest.raises(redis_errors.ConnectionError, match="cannot connect"):
        await pipe.ping()
    redis_server.start()
    assert await pipe.ping() == b"PONG"
    pipe.close()
    with pytest.raises(redis_errors.ConnectionError, match="closed"):
        await pipe.ping()


async def test_a_peer_that_is_not_redis_fails_cleanly() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pipe = RedisPipe(f"redis://127.0.0.1:{port}/0", connect_timeout_s=1)
    with pytest.raises(redis_errors.ConnectionError, match="protocol error"):
        await pipe.ping()
    pipe.close()
    server.close()


async def test_connect_opens_the_connection_before_the_first_command(
    redis_server: RedisServer,
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=2)
    pipe.connect()
    for _ in range(100):
        if pipe._transport is not None:
            break
        await asyncio.sleep(0.01)
    assert pipe._transport is not None  # connected with no command sent
    pipe.connect()  # already connected: nothing happens
    assert await pipe.ping() == b"PONG"
    pipe.close()


def test_connect_without_a_running_loop_waits_for_the_first_command() -> None:
    pipe = RedisPipe("redis://127.0.0.1:1/0", connect_timeout_s=0.1)
    pipe.connect()  # no loop here: nothing scheduled, nothing raised
    assert pipe._connecting is None and pipe._transport is None


def _hold_the_loop(seconds: float) -> None:
    """What a worker's start-up or a burst of requests does to its event loop."""
    time.sleep(seconds)


async def test_a_busy_loop_does_not_fail_a_connect_redis_answered(
    redis_server: RedisServer,
) -> None:
    # The connect is under way (its SYN sent) when the loop stops for longer than
    # the connect's bound; Redis accepted at once. The bound's timer fires late:
    # the loop's time, not Redis's, so the connect stands (it used to fail as
    # "cannot connect to redis", which took the link down: the quota went local).
    pipe = RedisPipe(redis_server.url, connect_timeout_s=0.1)
    pipe.connect()
    await asyncio.sleep(0)  # the connect task runs up to its wait for the socket
    assert pipe._connecting is not None and not pipe._connecting.done()
    _hold_the_loop(0.3)
    assert await pipe.ping() == b"PONG"
    pipe.close()


async def test_a_connect_nobody_accepts_still_fails_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A listener whose backlog is full drops the SYN: the connect hangs. With the
    # loop idle the bound's timer is on time, so the connect fails at the bound:
    # with the cap out of reach, only a timer found late again and again (a loop
    # busy every 0.2 s for a minute) would keep it waiting.
    monkeypatch.setattr(pipe_module, "_CONNECT_CAP_S", 3600.0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)  # fills the backlog
    pipe = RedisPipe(f"redis://127.0.0.1:{port}/0", connect_timeout_s=0.2)
    try:
        with pytest.raises(redis_errors.ConnectionError, match="cannot connect"):
            async with asyncio.timeout(60):
                await pipe.ping()
    finally:
        pipe.close()
        filler.close()
        listener.close()


# -- send: replies by callback, from the read itself ------------------------------------


async def test_send_hands_each_reply_to_its_callback_from_the_read_in_order(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=2)
    await pipe.ping()
    reading = False
    read = pipe.data_received

    def data_received(data: bytes) -> None:
        nonlocal reading
        reading = True
        read(data)
        reading = False

    pipe.data_received = data_received  # type: ignore[method-assign]
    seen: list[tuple[object, bool]] = []
    done = asyncio.get_running_loop().create_future()

    def broken(reply: object) -> None:
        raise RuntimeError("a caller's bug")

    pipe.send(("SET", "cb", "1"), lambda r: seen.append((r, reading)))
    pipe.send(("NOSUCHCOMMAND",), lambda r: seen.append((type(r), reading)))
    pipe.send(("ECHO", "x"), broken)
    pipe.send(("GET", "cb"), lambda r: (seen.append((r, reading)), done.set_result(None)))
    await done
    assert seen == [
        (b"OK", True),
        (redis_errors.ResponseError, True),  # an error reply: the exception, not raised
        (b"1", True),  # after a callback that raised
    ]
    assert "callback failed" in caplog.text
    pipe.close()


async def test_a_command_on_an_idle_connection_is_written_at_once(
    redis_server: RedisServer,
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=2)
    await pipe.ping()
    assert pipe._transport is not None
    writes: list[bytes] = []
    write = pipe._transport.write

    def counted(data: bytes) -> None:  # type: ignore[override]
        writes.append(data)
        write(data)

    pipe._transport.write = counted  # type: ignore[method-assign]
    replies: list[object] = []
    pipe.send(("ECHO", "alone"), replies.append)
    assert len(writes) == 1  # nothing else in flight: no wait for the end of the turn
    # while it is in flight, the turn's other commands leave together
    pipe.send(("ECHO", "b"), replies.append)
    pipe.send(("ECHO", "c"), replies.append)
    assert len(writes) == 1
    assert await pipe.submit("ECHO", "d") == b"d"
    assert len(writes) == 2 and replies == [b"alone", b"b", b"c"]
    pipe.close()


async def test_a_lost_connection_calls_every_callback_with_the_error(
    redis_server: RedisServer,
) -> None:
    pipe = RedisPipe(redis_server.url, connect_timeout_s=0.5)
    await pipe.ping()
    errors: list[object] = []
    pipe.send(("BLPOP", "never", "5"), errors.append)
    await asyncio.sleep(0.05)
    redis_server.stop()
    for _ in range(200):
        if errors:
            break
        await asyncio.sleep(0.01)
    assert len(errors) == 1 and isinstance(errors[0], redis_errors.ConnectionError)
    pipe.close()
    pipe.send(("PING",), errors.append)  # closed: told at once
    assert len(errors) == 2 and "closed" in str(errors[1])
