"""Minimal HTTP/1.1 over asyncio streams: one request per connection, bounded sizes and times.

The agent cannot use aiohttp (standard library only), so its admin server, its client for the decode
owner's unix control socket and its engine health checks all go through this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

# Before Python 3.11 asyncio.wait_for raised asyncio.TimeoutError, a class distinct from TimeoutError.
TIMEOUT_ERRORS = (TimeoutError, asyncio.TimeoutError)

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
# A size field is a short run of digits: `-5`, `+5`, ` 5` or 5,000 digits are malformed, not numbers to parse.
_CONTENT_LENGTH = re.compile(rb"[0-9]{1,12}")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,8}")


class HttpError(Exception):
    """A request that cannot be parsed; `status` is what the server should answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body.decode() or "null")


def _parse_headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw in lines:
        if not raw:
            continue
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name.strip() or name != name.strip():
            raise HttpError(400, f"malformed header line {raw[:80]!r}")
        headers[name.lower()] = value.strip()
    return headers


async def _read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise HttpError(400, "connection closed inside the request head") from e
    except asyncio.LimitOverrunError as e:
        raise HttpError(431, f"request head exceeds {MAX_HEADER_BYTES} bytes") from e
    if len(head) > MAX_HEADER_BYTES:
        raise HttpError(431, f"request head exceeds {MAX_HEADER_BYTES} bytes")
    return head[:-4].split(b"\r\n")


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], max_body: int, until_eof: bool) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return await _read_chunked(reader, max_body)
    length_text = headers.get("content-length")
    if length_text is None:
        return await reader.read(max_body + 1) if until_eof else b""
    if not _CONTENT_LENGTH.fullmatch(length_text.encode("latin-1")):
        raise HttpError(400, f"bad Content-Length {length_text[:40]!r}")
    length = int(length_text)
    if length > max_body:
        raise HttpError(413, f"body of {length} bytes exceeds the {max_body}-byte limit")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise HttpError(400, "connection closed inside the body") from e


async def _read_line(reader: asyncio.StreamReader, what: str) -> bytes:
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.IncompleteReadError as e:
        raise HttpError(400, f"connection closed inside the {what}") from e
    except asyncio.LimitOverrunError as e:
        raise HttpError(400, f"{what} line too long") from e


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    body = bytearray()
    while True:
        size_line = await _read_line(reader, "chunk size")
        size_text = size_line[:-2].split(b";")[0]
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise HttpError(400, f"bad chunk size {size_line[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            await _read_line(reader, "chunked trailer")
            return bytes(body)
        if len(body) + size > max_body:
            raise HttpError(413, f"body exceeds the {max_body}-byte limit")
        try:
            body += await reader.readexactly(size)
            end = await reader.readexactly(2)
        except asyncio.IncompleteReadError as e:
            raise HttpError(400, "connection closed inside a chunk") from e
        if end != b"\r\n":
            raise HttpError(400, "chunk not followed by CRLF")


@dataclass(frozen=True)
class RequestHead:
    """A request line and headers, read before (and without) the body."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


async def read_head(reader: asyncio.StreamReader) -> RequestHead | None:
    """Read a request line and headers; None when the peer closed without sending anything."""
    lines = await _read_head(reader)
    if lines is None:
        return None
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {lines[0][:80]!r}")
    method, target, _version = parts
    headers = _parse_headers(lines[1:])
    url = urlsplit(target)
    return RequestHead(method.upper(), url.path or "/", dict(parse_qsl(url.query)), headers)


async def read_body(reader: asyncio.StreamReader, head: RequestHead, max_body: int = MAX_BODY_BYTES) -> Request:
    """The body that follows `head` (so a caller can authorize before reading up to `max_body` bytes)."""
    body = await _read_body(reader, head.headers, max_body, until_eof=False)
    return Request(head.method, head.path, head.query, head.headers, body)


async def read_request(reader: asyncio.StreamReader, max_body: int = MAX_BODY_BYTES) -> Request | None:
    """Read one request; None when the peer closed without sending anything."""
    head = await read_head(reader)
    return None if head is None else await read_body(reader, head, max_body)


def render_response(status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    headers = {"Content-Type": content_type, "Content-Length": str(len(body)), "Connection": "close"}
    headers.update(extra or {})
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1") + body


def json_response(status: int, payload: Any, extra: dict[str, str] | None = None) -> bytes:
    body = (json.dumps(payload, sort_keys=True) + "\n").encode()
    return render_response(status, body, "application/json", extra)


def render_request(method: str, target: str, host: str, body: bytes | None, headers: dict[str, str] | None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    payload = body or b""
    if body is not None:
        lines.append(f"Content-Length: {len(payload)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


async def read_response(reader: asyncio.StreamReader, max_body: int = MAX_BODY_BYTES) -> Response:
    lines = await _read_head(reader)
    if lines is None:
        raise HttpError(502, "peer closed the connection without a response")
    status_parts = lines[0].decode("latin-1").split(" ", 2)
    try:
        status = int(status_parts[1])
    except (IndexError, ValueError) as e:
        raise HttpError(502, f"malformed status line {lines[0][:80]!r}") from e
    headers = _parse_headers(lines[1:])
    body = await _read_body(reader, headers, max_body, until_eof=True)
    return Response(status, body, headers)


async def _exchange(
    opened: Any, method: str, target: str, host: str, body: bytes | None, headers: dict[str, str] | None
) -> Response:
    reader, writer = await opened
    try:
        writer.write(render_request(method, target, host, body, headers))
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def request_unix(
    socket_path: str,
    method: str,
    target: str,
    payload: Any = None,
    timeout: float = 10.0,
) -> Response:
    """One JSON request over a unix socket (the decode owner's control API)."""
    body = None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"} if body is not None else None
    opened = asyncio.open_unix_connection(socket_path, limit=MAX_HEADER_BYTES * 4)
    return await asyncio.wait_for(_exchange(opened, method, target, "localhost", body, headers), timeout)


async def request_tcp(host: str, port: int, method: str, target: str, timeout: float = 5.0) -> Response:
    """One bodiless request over TCP (engine health checks)."""
    opened = asyncio.open_connection(host, port, limit=MAX_HEADER_BYTES * 4)
    return await asyncio.wait_for(_exchange(opened, method, target, f"{host}:{port}", None, None), timeout)
