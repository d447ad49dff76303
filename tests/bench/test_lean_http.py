"""The big herd's lean HTTP client against a real socket server: what it sends and how it reads answers."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from bench.lean_http import LeanHttpClient, LeanHttpError


@pytest.fixture
def answering() -> Iterator[tuple[str, list[bytes], list[bytes]]]:
    """A loopback server that records each request and answers it with the next canned bytes, then closes."""
    answers: list[bytes] = []
    received: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(
                    next(line for line in head.split(b"\r\n") if line.startswith(b"Content-Length")).split(
                        b":"
                    )[1]
                )
                while len(body) < length:
                    body += conn.recv(65536)
                received.append(head + b"\r\n\r\n" + body)
                conn.sendall(answers.pop(0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", answers, received
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() alone would not, on Linux)
    listener.close()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_request_goes_out_whole_and_its_answer_is_read_to_its_length(answering: tuple) -> None:
    url, answers, received = answering
    answers.append(b'HTTP/1.1 409 Conflict\r\nContent-Length: 21\r\n\r\n{"error": "conflict"}trailing')
    client = LeanHttpClient(url, headers={"Authorization": "Bearer k"})

    answer = client.request(
        "POST", "/calendars/c/holds", json={"start_time": "x"}, headers={"X-Request-ID": "r1"}
    )

    assert answer.status_code == 409
    assert answer.json() == {"error": "conflict"}
    head, _, body = received[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/calendars/c/holds HTTP/1.1"
    assert {
        "Authorization: Bearer k",
        "X-Request-ID: r1",
        "Connection: close",
        "Content-Type: application/json",
    } <= set(lines)
    assert json.loads(body) == {"start_time": "x"}


def test_a_chunked_answer_is_put_back_together(answering: tuple) -> None:
    url, answers, _ = answering
    answers.append(
        b'HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n2;x=y\r\n1}\r\n0\r\n\r\n'
    )

    assert LeanHttpClient(url).request("GET", "/me").json() == {"a": 1}


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n",  # not HTTP
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}",  # cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # no chunk size
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{}",  # cut inside a chunk
    ],
)
def test_an_answer_it_cannot_read_is_an_error_the_session_counts(answering: tuple, answer: bytes) -> None:
    url, answers, _ = answering
    answers.append(answer)

    with pytest.raises(LeanHttpError):
        LeanHttpClient(url).request("GET", "/me")


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError):
        LeanHttpClient("ftp://127.0.0.1/v1")
