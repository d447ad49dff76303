"""SSRF guard: which webhook URLs are refused, and why.

DNS is faked for every test here (a dict of name -> addresses), so no test depends on, or sends
anything to, a real resolver; nothing here opens a connection.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from webhooks.url_guard import UnsafeWebhookUrl, resolve_pinned, validate_webhook_url


class FakeDns:
    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.lookups: list[str] = []

    def getaddrinfo(self, host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        self.lookups.append(host)
        if host not in self.records:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                socket.IPPROTO_TCP,
                "",
                (address, port, 0, 0) if ":" in address else (address, port),
            )
            for address in self.records[host]
        ]


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDns]:
    fake = FakeDns()
    monkeypatch.setattr(socket, "getaddrinfo", fake.getaddrinfo)
    yield fake


@pytest.fixture(autouse=True)
def private_targets_refused(settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False


def refused(url: str) -> str:
    with pytest.raises(UnsafeWebhookUrl) as caught:
        validate_webhook_url(url)
    return caught.value.reason


# --- URL shape -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/",
        "file:///etc/passwd",
        "gopher://hooks.example.com/",
        "//hooks.example.com/x",
    ],
)
def test_it_refuses_schemes_other_than_http_and_https(url: str) -> None:
    assert "http" in refused(url)


@pytest.mark.parametrize("url", ["http://", "https:///path", "not a url"])
def test_it_refuses_a_url_without_host(url: str) -> None:
    refused(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pass@hooks.example.com/",
        "https://user@hooks.example.com/",
        "https://:x@hooks.example.com/",
    ],
)
def test_it_refuses_credentials_in_the_url(url: str) -> None:
    assert "credentials" in refused(url)


def test_it_refuses_a_backslash_trick_by_parsing_as_httpx_does() -> None:
    # httpx reads this as user "hooks.example.com\" at host evil.example: refused for the userinfo.
    assert "credentials" in refused("http://hooks.example.com\\@evil.example/")


@pytest.mark.parametrize("port", ["0", "65536", "99999"])
def test_it_refuses_ports_out_of_range(port: str, dns: FakeDns) -> None:
    dns.records["hooks.example.com"] = ["93.184.216.34"]
    assert "port" in refused(f"https://hooks.example.com:{port}/")


def test_it_refuses_a_url_longer_than_2048_characters(dns: FakeDns) -> None:
    dns.records["hooks.example.com"] = ["93.184.216.34"]
    base = "https://hooks.example.com/"
    validate_webhook_url(base + "a" * (2048 - len(base)))
    assert "longer" in refused(base + "a" * (2049 - len(base)))


def test_it_refuses_a_malformed_host_name() -> None:
    assert "malformed" in refused("http://hooks example.com/")


# --- IP literals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("[::1]", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("[fc00::1]", "private"),
        ("[fd12:3456::1]", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("169.254.0.1", "link-local"),
        ("[fe80::1]", "link-local"),
        ("100.64.0.1", "CGNAT"),
        ("100.127.255.254", "CGNAT"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("[ff02::1]", "multicast"),
        ("[ff0e::1]", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("[::]", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "reserved"),
        ("198.18.0.1", "reserved"),
        ("[2001:db8::1]", "reserved"),
        ("[fec0::1]", "site-local"),
        ("[::ffff:127.0.0.1]", "loopback"),  # IPv4-mapped
        ("[::ffff:169.254.169.254]", "link-local"),
        ("[::ffff:10.0.0.1]", "private"),
        ("[2002:7f00:1::]", "loopback"),  # 6to4 of 127.0.0.1
        ("[2002:a00:1::]", "private"),  # 6to4 of 10.0.0.1
        ("[64:ff9b::7f00:1]", "loopback"),  # NAT64 of 127.0.0.1
        ("[64:ff9b::a9fe:a9fe]", "link-local"),  # NAT64 of 169.254.169.254
        ("[64:ff9b:1::1]", "reserved"),
        ("[::7f00:1]", "reserved"),  # IPv4-compatible IPv6
        ("[2001::1]", "reserved"),  # Teredo
    ],
)
def test_it_refuses_ip_literals_that_are_not_globally_routable(
    host: str, category: str, dns: FakeDns
) -> None:
    reason = refused(f"https://{host}:8443/hook")

    assert category in reason
    assert dns.lookups == []  # an IP literal is judged as is, never resolved


@pytest.mark.parametrize(
    "host", ["93.184.216.34", "[2606:4700:4700::1111]", "[::ffff:93.184.216.34]", "[64:ff9b::5db8:d822]"]
)
def test_it_accepts_public_ip_literals(host: str, dns: FakeDns) -> None:
    # Validation only: nothing connects to these addresses.
    validate_webhook_url(f"https://{host}/hook")
    assert dns.lookups == []


# --- host names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "api.localhost",
        "metadata.google.internal",
        "printer.local",
        "nas.home.arpa",
        "localhost.localdomain",
    ],
)
def test_it_refuses_local_host_names_without_resolving_them(host: str, dns: FakeDns) -> None:
    dns.records[host.lower()] = ["93.184.216.34"]  # even if a resolver answered with a public address

    assert "local host name" in refused(f"http://{host}/hook")
    assert dns.lookups == []


def test_it_refuses_a_single_label_host_name(dns: FakeDns) -> None:
    dns.records["intranet"] = ["93.184.216.34"]

    assert "fully qualified" in refused("http://intranet/hook")


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.5", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.1.1", "CGNAT"),
        ("::1", "loopback"),
        ("fd00::5", "private"),
        ("::ffff:192.168.0.1", "private"),
    ],
)
def test_it_refuses_a_name_that_resolves_to_a_private_address(
    address: str, category: str, dns: FakeDns
) -> None:
    dns.records["hooks.example.com"] = [address]

    reason = refused("https://hooks.example.com/hook")

    assert category in reason
    assert "hooks.example.com resolves to" in reason


def test_it_refuses_a_name_when_any_of_its_addresses_is_private(dns: FakeDns) -> None:
    # The public address first: checking only the first answer would let this through.
    dns.records["rebind.example.com"] = ["93.184.216.34", "127.0.0.1"]

    assert "loopback" in refused("https://rebind.example.com/hook")


@pytest.mark.parametrize("host", ["127.1", "0x7f.0.0.1"])
def test_it_judges_odd_ipv4_spellings_by_the_address_they_resolve_to(host: str, dns: FakeDns) -> None:
    # Not IP literals to ipaddress, but the C resolver reads them as 127.0.0.1 (inet_aton).
    dns.records[host] = ["127.0.0.1"]

    assert "loopback" in refused(f"http://{host}/hook")


def test_it_refuses_an_octal_ipv4_spelling_as_malformed(dns: FakeDns) -> None:
    dns.records["0177.0.0.1"] = ["127.0.0.1"]

    assert "malformed" in refused("http://0177.0.0.1/hook")


def test_it_accepts_a_name_that_resolves_only_to_public_addresses(dns: FakeDns) -> None:
    dns.records["hooks.example.com"] = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]

    validate_webhook_url("https://hooks.example.com/hook")
    assert dns.lookups == ["hooks.example.com"]


def test_it_resolves_the_idna_form_of_an_international_name(dns: FakeDns) -> None:
    dns.records["xn--bcher-kva.example"] = ["93.184.216.34"]

    validate_webhook_url("https://bücher.example/hook")
    assert dns.lookups == ["xn--bcher-kva.example"]


def test_it_refuses_a_name_that_does_not_resolve() -> None:
    assert "cannot resolve" in refused("https://no-such-host.example.com/hook")


# --- resolve_pinned ------------------------------------------------------------------------------


def test_resolve_pinned_returns_a_checked_address(dns: FakeDns) -> None:
    dns.records["hooks.example.com"] = ["93.184.216.34", "93.184.216.35"]

    assert resolve_pinned("hooks.example.com", 443) == "93.184.216.34"
    assert dns.lookups == ["hooks.example.com"]  # resolved once


def test_resolve_pinned_prefers_ipv4(dns: FakeDns) -> None:
    dns.records["hooks.example.com"] = ["2606:2800:220:1:248:1893:25c8:1946", "93.184.216.34"]

    assert resolve_pinned("hooks.example.com", 443) == "93.184.216.34"


def test_resolve_pinned_refuses_a_mixed_answer(dns: FakeDns) -> None:
    dns.records["hooks.example.com"] = ["93.184.216.34", "10.0.0.1"]

    with pytest.raises(UnsafeWebhookUrl, match="private"):
        resolve_pinned("hooks.example.com", 443)


def test_resolve_pinned_returns_an_ip_literal_as_is(dns: FakeDns) -> None:
    assert resolve_pinned("93.184.216.34", 443) == "93.184.216.34"
    assert resolve_pinned("[2606:4700:4700::1111]", 443) == "2606:4700:4700::1111"
    assert dns.lookups == []


def test_resolve_pinned_reports_dns_failure() -> None:
    with pytest.raises(UnsafeWebhookUrl, match="cannot resolve"):
        resolve_pinned("no-such-host.example.com", 443)


# --- WEBHOOK_ALLOW_PRIVATE_TARGETS ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://[::1]:8000/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "http://localhost:8000/hook",
        "http://receiver/hook",
    ],
)
def test_private_targets_are_allowed_when_the_setting_is_on(url: str, settings: Any, dns: FakeDns) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    dns.records.update({"localhost": ["127.0.0.1"], "receiver": ["172.18.0.5"]})

    validate_webhook_url(url)


def test_the_url_shape_is_still_checked_when_private_targets_are_allowed(settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True

    assert "credentials" in refused("http://user:pw@127.0.0.1/hook")
    assert "http" in refused("ftp://127.0.0.1/hook")
    assert "port" in refused("http://127.0.0.1:0/hook")


def test_resolve_pinned_with_private_targets_allowed(settings: Any, dns: FakeDns) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    dns.records["localhost"] = ["127.0.0.1"]

    assert resolve_pinned("localhost", 8000) == "127.0.0.1"
