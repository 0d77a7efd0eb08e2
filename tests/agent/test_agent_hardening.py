"""The admin API under hostile input: bind address parsing, token before body, malformed sizes,
oversized numbers, a connection cap, and no exception escaping a handler (issue 13)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from semipd.agent import admin as admin_module
from semipd.agent.__main__ import UsageError, check_bind_address
from semipd.agent.admin import AdminServer
from semipd.agent.auth import TokenFile
from semipd.agent.drivers import DRIVERS
from semipd.agent.split import Split, SplitBounds
from semipd.agent.supervisor import Settings, Supervisor

TOKEN = "s3cret-token"


@pytest.mark.parametrize(
    ("host", "pod_ip"),
    [
        ("0", None),
        ("::0", None),
        ("000.000.000.000", None),
        ("0.0.0.0", "0.0.0.0"),
        ("::", None),
        ("", None),
        ("localhost", None),
        ("10.0.0.5", None),
        ("10.0.0.5", "10.0.0.6"),
        ("224.0.0.1", "224.0.0.1"),
    ],
)
def test_unsafe_bind_addresses_are_refused(host: str, pod_ip: str | None) -> None:
    with pytest.raises(UsageError, match="refusing to bind"):
        check_bind_address(host, pod_ip)


@pytest.mark.parametrize(
    ("host", "pod_ip"), [("127.0.0.1", None), ("127.0.3.7", "10.0.0.5"), ("::1", None), ("10.0.0.5", "10.0.0.5")]
)
def test_loopback_or_the_pod_ip_may_be_bound(host: str, pod_ip: str | None) -> None:
    assert check_bind_address(host, pod_ip) == host


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[AdminServer]:
    (tmp_path / "token").write_text(TOKEN)
    settings = Settings(
        driver=DRIVERS["sim"], engine_argv=(), run_dir=str(tmp_path), initial=Split(50, 100), bounds=SplitBounds()
    )
    srv = AdminServer(Supervisor(settings, {}), TokenFile(str(tmp_path / "token")), "127.0.0.1", 0)
    await srv.start()
    assert srv._server is not None
    srv.port = srv._server.sockets[0].getsockname()[1]
    yield srv
    await srv.close()


async def exchange(
    srv: AdminServer, raw: bytes, timeout: float = 3.0, eof: bool = False
) -> tuple[int, dict[str, object]]:
    """Send raw bytes (half-closing our side when `eof`) and read the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    try:
        writer.write(raw)
        if eof:
            writer.write_eof()
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), answer[:200]
    return int(head.split(b" ")[1]), json.loads(body or b"null")


def put(headers: str, body: bytes = b"", token: str | None = TOKEN) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"PUT /v1/split HTTP/1.1\r\nHost: x\r\n{auth}{headers}\r\n".encode() + body


async def test_token_is_checked_before_the_body_is_read(server: AdminServer) -> None:
    # A 1 MiB body is announced but never sent: the answer must not wait for it.
    status, body = await exchange(server, put("Content-Length: 1048576\r\n", token=None), timeout=2.0)
    assert (status, body["reason"]) == (401, "Unauthorized")


@pytest.mark.parametrize(
    "framing",
    [
        b"Transfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n0\r\n\r\n",
        b"Transfer-Encoding: chunked\r\n\r\n" + b"f" * 40 + b"\r\n",
        b"Transfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n",
        b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n",
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"Content-Length: -1\r\n\r\n",
        b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n",
        b"Content-Length: +2\r\n\r\n{}",
    ],
    ids=["negative-chunk", "over-long-chunk", "signed-chunk", "chunk-without-crlf", "truncated-chunk",
         "negative-length", "5000-digit-length", "signed-length"],
)  # fmt: skip
async def test_malformed_framing_is_400(server: AdminServer, framing: bytes) -> None:
    head = b"PUT /v1/split HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
    status, body = await exchange(server, head + framing, eof=True)
    assert status == 400, body


async def test_a_5000_digit_number_in_the_body_is_400(server: AdminServer) -> None:
    payload = b'{"prefillPercent": ' + b"7" * 5000 + b"}"
    status, body = await exchange(server, put(f"Content-Length: {len(payload)}\r\n", payload))
    assert status == 400
    assert "not valid JSON" in str(body["error"])


async def test_connections_beyond_the_cap_get_503(server: AdminServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_module, "MAX_CONNECTIONS", 2)
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    await asyncio.sleep(0.1)  # both are accepted and waiting for a request head
    status, body = await exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, body["reason"]) == (503, "TooManyConnections")
    for _, writer in idle:
        writer.close()
    await asyncio.sleep(0.1)
    assert (await exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))[0] == 200


async def test_a_handler_bug_is_a_500_not_an_escaping_exception(
    server: AdminServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(req: object) -> bytes:
        raise KeyError("bug")

    monkeypatch.setattr(server, "handle", broken)
    loop_errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: loop_errors.append(ctx))
    with caplog.at_level(logging.ERROR, logger="semipd.agent.admin"):
        status, body = await exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, body["reason"]) == (500, "InternalError")
    assert loop_errors == []
