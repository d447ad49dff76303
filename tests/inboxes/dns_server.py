"""A real DNS server for tests: UDP on a free local port, answering TXT queries from a dict (dnspython
parses the queries and builds the answers), with INBOUND_DOMAIN_DNS_SERVER pointed at it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest


@dataclass
class DnsServer:
    """`txt` maps a name (lowercase, no trailing dot) to its TXT values; other names are NXDOMAIN. With
    `silent` set the server reads queries and never answers (a server down, a packet lost)."""

    port: int
    txt: dict[str, list[str]] = field(default_factory=dict)
    silent: bool = False
    queries: list[str] = field(default_factory=list)

    def publish(self, name: str, value: str) -> None:
        self.txt.setdefault(name.lower().rstrip("."), []).append(value)

    def answer(self, wire: bytes) -> bytes | None:
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        for question in query.question:
            name = question.name.to_text(omit_final_dot=True).lower()
            self.queries.append(name)
            if name not in self.txt:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype == dns.rdatatype.TXT:
                values = [f'"{value}"' for value in self.txt[name]]
                response.answer.append(dns.rrset.from_text(question.name, 60, "IN", "TXT", *values))
        return None if self.silent else response.to_wire()


@pytest.fixture
def dns_server(settings: Any) -> Iterator[DnsServer]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.05)
    server = DnsServer(port=sock.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                wire, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            answer = server.answer(wire)
            if answer is not None:
                sock.sendto(answer, peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    settings.INBOUND_DOMAIN_DNS_SERVER = f"127.0.0.1:{server.port}"
    settings.INBOUND_DOMAIN_DNS_TIMEOUT_SECONDS = 1
    yield server
    stop.set()
    thread.join()
    sock.close()
