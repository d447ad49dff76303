"""A lean HTTP/1.1 client for the big herd's racers: one request per connection, as the servers answer.

With 500 racers as threads of one interpreter, httpx cost 1.7–3.3 ms of CPU per attempt on the cores the
web workers use (its connection pool, its locks, its response model), more than half the server's own
per-attempt CPU, so a round measured the harness nearly as much as the server. This client sends one
prepared request on a socket of its own and reads the answer until the server closes it (gunicorn's sync
workers close after every response; the request says `Connection: close` for any other server).
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit


class LeanHttpError(OSError):
    """An answer that is not HTTP/1.x as this client reads it."""


class LeanResponse:
    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)


class LeanHttpClient:
    """`LeanHttpClient("http://127.0.0.1:8000/v1", headers={...}).request("POST", "/path", json={...})`"""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.tls = (tls or ssl.create_default_context()) if parts.scheme == "https" else None
        self.timeout = timeout
        fixed = {"Host": parts.netloc, "Accept": "application/json", "Connection": "close", **(headers or {})}
        self.fixed_headers = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())

    def request(
        self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> LeanResponse:
        body = b"" if json is None else _dumps(json)
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self.fixed_headers}"
        head += "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        if json is not None:
            head += "Content-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        with socket.create_connection((self.host, self.port), timeout=self.timeout) as raw:
            sock = self.tls.wrap_socket(raw, server_hostname=self.host) if self.tls else raw
            sock.sendall(head.encode("latin-1") + body)
            return _parse(_read_to_end(sock))

    def close(self) -> None:
        """Nothing stays open between requests."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _read_to_end(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(answer: bytes) -> LeanResponse:
    head, separator, rest = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    version, _, status = status_line.partition(b" ")
    if not separator or not version.startswith(b"HTTP/1.") or not status[:3].isdigit():
        raise LeanHttpError(f"not an HTTP/1.x answer: {answer[:80]!r}")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        return LeanResponse(int(status[:3]), _unchunk(rest))
    if (length := headers.get(b"content-length")) is not None:
        if len(rest) < int(length):
            raise LeanHttpError(f"the answer ended after {len(rest)} of {int(length)} bytes")
        rest = rest[: int(length)]
    return LeanResponse(int(status[:3]), rest)


def _unchunk(data: bytes) -> bytes:
    body: list[bytes] = []
    at = 0
    while True:
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            raise LeanHttpError("a chunked answer ended inside a chunk's size line")
        try:
            size = int(data[at:line_end].split(b";", 1)[0], 16)
        except ValueError:
            raise LeanHttpError(f"not a chunk size: {data[at:line_end][:20]!r}") from None
        if size == 0:
            return b"".join(body)
        start = line_end + 2
        if len(data) < start + size:
            raise LeanHttpError("a chunked answer ended inside a chunk")
        body.append(data[start : start + size])
        at = start + size + 2
