"""HTTP/1.1 parsing of the agent's minimal server and client."""

from __future__ import annotations

import asyncio

import pytest

from semipd.agent import httpwire


def reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=httpwire.MAX_HEADER_BYTES * 4)
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_request_with_body_and_query() -> None:
    raw = b"PUT /v1/split?wait=false HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nContent-Length: 2\r\n\r\n{}"
    req = await httpwire.read_request(reader_of(raw))
    assert req is not None
    assert (req.method, req.path, req.query, req.body) == ("PUT", "/v1/split", {"wait": "false"}, b"{}")
    assert req.header("AUTHORIZATION") == "Bearer t"


async def test_empty_connection_is_none() -> None:
    assert await httpwire.read_request(reader_of(b"")) is None


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad header\r\n\r\n", 400),
        (b"PUT / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"PUT / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 400),
        (b"PUT / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nHost: x", 400),
    ],
)
async def test_malformed_requests(raw: bytes, status: int) -> None:
    with pytest.raises(httpwire.HttpError) as err:
        await httpwire.read_request(reader_of(raw))
    assert err.value.status == status


async def test_chunked_and_close_delimited_responses() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    assert (await httpwire.read_response(reader_of(chunked))).body == b"abcde"
    until_eof = b"HTTP/1.1 503 Service Unavailable\r\n\r\nbusy"
    resp = await httpwire.read_response(reader_of(until_eof))
    assert (resp.status, resp.body) == (503, b"busy")


async def test_rendered_response_round_trips() -> None:
    data = httpwire.json_response(409, {"error": "busy"}, {"X-A": "1"})
    resp = await httpwire.read_response(reader_of(data))
    assert resp.status == 409
    assert resp.json() == {"error": "busy"}
    assert resp.headers["x-a"] == "1"
