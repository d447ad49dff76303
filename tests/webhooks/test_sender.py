"""One delivery attempt against a real HTTP receiver on 127.0.0.1.

Every connection goes to a socket these tests bound themselves on 127.0.0.1, and host names are
answered by a fake resolver that knows only the test's names, so nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from webhooks import sender
from webhooks.sender import AttemptResult, send_webhook
from webhooks.signing import new_signing_secret

BODY = b'{"type":"booking.committed","data":{"booking_id":"bkg_1","title":"Caf\xc3\xa9 sync"}}'
TEST_HOST = "hooks.agentcal.test"


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"ok":true}'
    # When set, the handler waits for it (at most a few seconds) before answering.
    hold_until: threading.Event | None = None


class Receiver:
    def __init__(self, server: _Server, *, scheme: str) -> None:
        self.server = server
        self.scheme = scheme
        self.requests: list[ReceivedRequest] = []
        self.connections = 0
        self.reply = Reply()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/hooks/agentcal", *, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        receiver.requests.append(ReceivedRequest(path=self.path, headers=headers, body=body))
        reply = receiver.reply
        if reply.hold_until is not None:
            reply.hold_until.wait(timeout=5)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    receiver: Receiver

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.receiver.connections += 1
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The timeout tests' client hangs up before the reply: a broken pipe here is expected.
        pass


@contextlib.contextmanager
def running_receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    server = _Server(("127.0.0.1", 0), _Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    receiver = Receiver(server, scheme="http" if tls is None else "https")
    server.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.reply.hold_until is not None:
            receiver.reply.hold_until.set()  # let a held handler finish before the server closes
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


@pytest.fixture(autouse=True)
def private_targets_allowed(settings: Any) -> None:
    # The receiver is on 127.0.0.1, which the SSRF guard refuses unless this is on.
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True


class FakeDns:
    """Answers TEST_HOST with 127.0.0.1; anything else only if it is a numeric address."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.records: dict[str, str] = {TEST_HOST: "127.0.0.1"}
        self.name_lookups: list[str] = []

    def getaddrinfo(
        self, host: str, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> Any:
        if host in self.records:
            self.name_lookups.append(host)
            host = self.records[host]
        # AI_NUMERICHOST: an IP address is converted locally; a name fails instead of reaching DNS.
        return self.real(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    fake = FakeDns(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", fake.getaddrinfo)
    return fake


def send(url: str, *, secret: str | None = None, timeout: float | None = 5.0) -> AttemptResult:
    return send_webhook(
        url=url,
        secret=secret or new_signing_secret(),
        msg_id="msg_2x5Yc9",
        timestamp=int(time.time()),
        body=BODY,
        timeout=timeout,
    )


# --- answers ---------------------------------------------------------------------------------------


def test_a_2xx_answer_succeeds_and_the_receiver_can_verify_it(receiver: Receiver) -> None:
    secret = new_signing_secret()

    result = send(receiver.url("/hooks/agentcal?source=test"), secret=secret)

    assert result.succeeded
    assert (result.status_code, result.error, result.retry_after_seconds) == (200, "", None)
    assert result.response_excerpt == '{"ok":true}'
    assert result.latency_ms >= 0
    [request] = receiver.requests
    assert request.path == "/hooks/agentcal?source=test"
    assert request.body == BODY
    assert request.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"] == "AgentCal-Webhooks/1"
    assert request.headers["webhook-id"] == "msg_2x5Yc9"
    assert Webhook(secret).verify(request.body, request.headers)["data"]["booking_id"] == "bkg_1"


def test_a_5xx_answer_fails_and_keeps_retry_after_seconds(receiver: Receiver) -> None:
    receiver.reply = Reply(status=500, headers={"Retry-After": "7"}, body=b"database is down")

    result = send(receiver.url())

    assert not result.succeeded
    assert not result.gone
    assert (result.status_code, result.error, result.retry_after_seconds) == (500, "", 7)
    assert result.response_excerpt == "database is down"


def test_retry_after_as_an_http_date(receiver: Receiver) -> None:
    in_two_minutes = email.utils.formatdate(time.time() + 120, usegmt=True)
    receiver.reply = Reply(status=503, headers={"Retry-After": in_two_minutes})

    result = send(receiver.url())

    assert result.status_code == 503
    assert result.retry_after_seconds is not None
    assert 110 <= result.retry_after_seconds <= 121


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.reply = Reply(status=302, headers={"Location": receiver.url("/elsewhere")})

    result = send(receiver.url())

    assert not result.succeeded
    assert (result.status_code, result.error) == (302, "redirect_refused")
    assert [request.path for request in receiver.requests] == ["/hooks/agentcal"]


def test_410_means_gone(receiver: Receiver) -> None:
    receiver.reply = Reply(status=410, body=b"endpoint removed")

    result = send(receiver.url())

    assert result.gone
    assert not result.succeeded
    assert (result.status_code, result.error) == (410, "")


def test_the_excerpt_is_the_first_1000_characters_decoded_leniently(receiver: Receiver) -> None:
    receiver.reply = Reply(status=400, body=b"\xff\xfe" + "é".encode() * 5000)

    result = send(receiver.url())

    assert result.response_excerpt == "\ufffd\ufffd" + "é" * 998


# --- network failures --------------------------------------------------------------------------


def test_a_receiver_slower_than_the_timeout_gives_timeout(receiver: Receiver) -> None:
    receiver.reply = Reply(hold_until=threading.Event())

    result = send(receiver.url(), timeout=1.0)

    assert (result.status_code, result.error) == (None, "timeout")
    assert not result.succeeded
    assert 900 <= result.latency_ms < 3000
    assert len(receiver.requests) == 1  # it did arrive; the answer did not come in time


def test_the_default_timeout_comes_from_settings(receiver: Receiver, settings: Any) -> None:
    settings.WEBHOOK_TIMEOUT_SECONDS = 1
    receiver.reply = Reply(hold_until=threading.Event())

    result = send(receiver.url(), timeout=None)

    assert result.error == "timeout"
    assert result.latency_ms < 3000


def test_a_closed_port_gives_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]  # nothing listens once the probe is closed

    result = send(f"http://127.0.0.1:{closed_port}/hook")

    assert result.status_code is None
    assert result.error.startswith("connection_error: ")
    assert not result.succeeded


# --- SSRF guard and address pinning ----------------------------------------------------------


def test_loopback_is_refused_before_any_connection_when_private_targets_are_off(
    receiver: Receiver, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False

    result = send(receiver.url())

    assert result.status_code is None
    assert result.error.startswith("unsafe_url: ")
    assert "loopback" in result.error
    assert receiver.requests == []
    assert receiver.connections == 0


def test_a_local_name_is_refused_without_connecting(receiver: Receiver, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False

    result = send(receiver.url(host="localhost"))

    assert result.error.startswith("unsafe_url: ")
    assert receiver.connections == 0


def test_an_unresolvable_name_is_an_unsafe_url(receiver: Receiver) -> None:
    result = send(receiver.url(host="unknown.agentcal.test"))

    assert result.status_code is None
    assert result.error.startswith("unsafe_url: cannot resolve")
    assert receiver.connections == 0


def test_it_connects_to_the_pinned_address_and_keeps_the_host_name(receiver: Receiver, dns: FakeDns) -> None:
    secret = new_signing_secret()

    result = send(receiver.url(host=TEST_HOST), secret=secret)

    assert result.succeeded
    [request] = receiver.requests
    assert request.headers["host"] == f"{TEST_HOST}:{receiver.port}"
    Webhook(secret).verify(request.body, request.headers)
    # Resolved once, by the guard; the connection used the checked address, not a second lookup.
    assert dns.name_lookups == [TEST_HOST]


def test_it_never_logs_the_secret(receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    secret = new_signing_secret()
    caplog.set_level(logging.DEBUG)

    send(receiver.url(), secret=secret)
    send(receiver.url(host="unknown.agentcal.test"), secret=secret)

    assert secret.removeprefix("whsec_") not in caplog.text


# --- https: SNI and certificate checked against the registered name --------------------------


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """Makes a self-signed certificate and key for a host name with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("certs")

    def make(host: str) -> tuple[Path, Path]:
        cert, key = folder / f"{host}.crt", folder / f"{host}.key"
        if not cert.exists():
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
                + ["-nodes", "-days", "2", "-subj", f"/CN={host}", "-addext", f"subjectAltName=DNS:{host}"]
                + ["-keyout", str(key), "-out", str(cert)],
                check=True,
                capture_output=True,
            )
        return cert, key

    return make


@contextlib.contextmanager
def tls_receiver(cert: Path, key: Path) -> Iterator[tuple[Receiver, list[str | None]]]:
    server_names: list[str | None] = []

    def record_server_name(_socket: Any, name: str | None, _context: Any) -> None:
        server_names.append(name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = record_server_name
    with running_receiver(tls=context) as receiver:
        yield receiver, server_names


def trust(monkeypatch: pytest.MonkeyPatch, cert: Path) -> None:
    monkeypatch.setattr(sender, "_tls_context", lambda: ssl.create_default_context(cafile=str(cert)))


def test_https_sends_sni_and_verifies_the_certificate_for_the_host_name(
    certificates: Callable[[str], tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificates(TEST_HOST)
    trust(monkeypatch, cert)
    secret = new_signing_secret()

    with tls_receiver(cert, key) as (receiver, server_names):
        result = send(receiver.url(host=TEST_HOST), secret=secret)

    # The connection went to 127.0.0.1, yet the certificate (valid only for TEST_HOST) verified.
    assert result.succeeded, result.error
    assert server_names == [TEST_HOST]
    [request] = receiver.requests
    assert request.headers["host"] == f"{TEST_HOST}:{receiver.port}"
    Webhook(secret).verify(request.body, request.headers)


def test_https_refuses_a_certificate_for_another_name(
    certificates: Callable[[str], tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificates("other.agentcal.test")
    trust(monkeypatch, cert)

    with tls_receiver(cert, key) as (receiver, _server_names):
        result = send(receiver.url(host=TEST_HOST))

    assert result.status_code is None
    assert result.error.startswith("connection_error: ")
    assert "certificate verify failed" in result.error
    assert receiver.requests == []


def test_https_refuses_a_certificate_from_an_untrusted_issuer(
    certificates: Callable[[str], tuple[Path, Path]],
) -> None:
    cert, key = certificates(TEST_HOST)

    with tls_receiver(cert, key) as (receiver, _server_names):
        result = send(receiver.url(host=TEST_HOST))

    assert result.status_code is None
    assert "certificate verify failed" in result.error
    assert receiver.requests == []


# --- Retry-After parsing ------------------------------------------------------------------------

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("0", 0),
        (" 120 ", 120),
        ("86400", 86400),
        ("86401", 86400),
        ("9" * 5000, 86400),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (email.utils.format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90),
        (email.utils.format_datetime(NOW - timedelta(hours=1), usegmt=True), 0),
        (email.utils.format_datetime(NOW + timedelta(days=3), usegmt=True), 86400),
        ("Mon, 02 Mar 2026 12:00:30 GMT", 30),
    ],
)
def test_retry_after_parsing(header: str | None, seconds: int | None) -> None:
    assert sender._parse_retry_after(header, now=NOW) == seconds
