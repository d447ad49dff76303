"""SSRF protection for webhook targets.

An agent chooses the URL we POST to, so without these checks it could make AgentCal reach
services that only the server can see: the cloud metadata endpoint, localhost admin ports,
the private network. Every address a hostname resolves to must be globally routable, and the
sender connects to an address checked here (`resolve_pinned`) rather than resolving again, so a
DNS answer that changes between the check and the connection (DNS rebinding) cannot redirect it.

``settings.WEBHOOK_ALLOW_PRIVATE_TARGETS`` turns the address and hostname checks off, for local
development and tests against a receiver on 127.0.0.1; the URL shape checks always apply.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Final

import httpx
from django.conf import settings

from agentcal.errors import UnsafeWebhookUrl

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH: Final = 2048
ALLOWED_SCHEMES: Final = frozenset({"http", "https"})
DEFAULT_PORTS: Final = {"http": 80, "https": 443}

# Names that never leave the local machine or network. Refused by name because a resolver
# may answer them from /etc/hosts or mDNS, where the address check is the only other guard.
_LOCAL_NAMES: Final = frozenset({"localhost", "localhost.localdomain"})
_LOCAL_SUFFIXES: Final = (".localhost", ".internal", ".local", ".localdomain", ".home.arpa")

# One DNS label (letters, digits, hyphen; underscore too, which some real hosts use).
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")

# Named explicitly, and checked before `is_global`: `is_global` alone says nothing about *why*
# an address is refused, it varies between Python patch releases, and it calls multicast global.
_REFUSED_NETWORKS: Final[tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]] = tuple(
    (ipaddress.ip_network(cidr), label)
    for cidr, label in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (includes cloud metadata)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
        ("192.0.2.0/24", "reserved (documentation)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved (benchmarking)"),
        ("198.51.100.0/24", "reserved (documentation)"),
        ("203.0.113.0/24", "reserved (documentation)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # includes the broadcast address 255.255.255.255
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "reserved (IPv4-compatible IPv6)"),
        ("64:ff9b:1::/48", "reserved (local-use NAT64)"),
        ("100::/64", "reserved (discard)"),
        ("2001:db8::/32", "reserved (documentation)"),
        ("fc00::/7", "private (unique local)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

# The well-known NAT64 prefix (RFC 6052): a DNS64 resolver answers with it for IPv4-only hosts, so
# it is accepted when the IPv4 address inside is.
_NAT64_WELL_KNOWN: Final = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class WebhookTarget:
    """A URL that passed the shape checks, with the parts the sender needs to pin its address."""

    url: httpx.URL
    host: str  # ASCII (IDNA) form, without brackets: what resolution, SNI and certificates use
    port: int
    netloc: str  # ASCII host[:port] as it goes in the Host header


def parse_webhook_url(url: str) -> WebhookTarget:
    """Check everything that needs no DNS: scheme, host, userinfo, port, length."""
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeWebhookUrl(f"URL is longer than {MAX_URL_LENGTH} characters")
    try:
        # httpx parses it because httpx sends it: checking with a different parser than the
        # one that connects is how "http://good.example\@evil.example/" tricks slip through.
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise UnsafeWebhookUrl(f"malformed URL: {exc}") from None
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise UnsafeWebhookUrl("only http and https URLs are allowed")
    if parsed.userinfo:
        raise UnsafeWebhookUrl("credentials in the URL (user:password@) are not allowed")
    try:
        host = parsed.raw_host.decode("ascii").lower()
    except UnicodeDecodeError:
        raise UnsafeWebhookUrl("malformed host") from None
    if not host:
        raise UnsafeWebhookUrl("URL has no host")
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS[parsed.scheme]
    if not 1 <= port <= 65535:
        raise UnsafeWebhookUrl("port must be between 1 and 65535")
    if _ip_literal(host) is None:
        _check_hostname_syntax(host)
    return WebhookTarget(url=parsed, host=host, port=port, netloc=parsed.netloc.decode("ascii"))


def validate_webhook_url(url: str, *, allow_private: bool | None = None) -> None:
    """Raise `UnsafeWebhookUrl` unless every address the URL's host resolves to is safe to reach.
    `allow_private`: None reads settings.WEBHOOK_ALLOW_PRIVATE_TARGETS (other outbound URLs, such as
    upstream calendars, pass their own setting)."""
    target = parse_webhook_url(url)
    resolve_pinned(target.host, target.port, allow_private=allow_private)


def resolve_pinned(host: str, port: int, *, allow_private: bool | None = None) -> str:
    """Resolve ``host`` once, check every address, and return the one to connect to.

    Every address must pass, not just the one returned: a name that resolves to both a public
    and a private address is refused, since another resolver (or a retry) could pick either.
    """
    if allow_private is None:
        allow_private = settings.WEBHOOK_ALLOW_PRIVATE_TARGETS
    host = host.strip("[]").lower()
    literal = _ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        if not allow_private:
            _check_hostname_is_public(host)
        addresses = _resolve(host, port)
    if not allow_private:
        for address in addresses:
            reason = refusal_reason(address)
            if reason is not None:
                shown = host if literal is not None else f"{host} resolves to {address}, which"
                raise UnsafeWebhookUrl(f"{shown} is not a public address: {reason}")
    # IPv4 first: with a single pinned address there is no fallback, and many servers and
    # containers have no IPv6 route even when the name has AAAA records.
    ipv4_first = sorted(addresses, key=lambda address: address.version)
    return str(ipv4_first[0])


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be a webhook target, or None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address):
        # Addresses that carry an IPv4 address are judged by it too: ::ffff:127.0.0.1 reaches
        # loopback on a dual-stack socket, 2002:7f00:1:: through a 6to4 relay, 64:ff9b::a00:1
        # through a NAT64 gateway.
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = refusal_reason(embedded)
            if inner is not None:
                return f"embeds {embedded} ({inner})"
            if address.ipv4_mapped is not None:
                return None  # the same host as its public IPv4 address
        if address.teredo is not None:
            return "reserved (Teredo)"
    for network, label in _REFUSED_NETWORKS:
        if address.version == network.version and address in network:
            return label
    if address.is_multicast:
        return "multicast"
    if not address.is_global:
        return "not globally routable"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _check_hostname_syntax(host: str) -> None:
    name = host.removesuffix(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise UnsafeWebhookUrl("malformed host name")


def _check_hostname_is_public(host: str) -> None:
    name = host.removesuffix(".")  # "localhost." is the same name as "localhost"
    if name in _LOCAL_NAMES or name.endswith(_LOCAL_SUFFIXES):
        raise UnsafeWebhookUrl(f"{name} is a local host name")
    if "." not in name:
        # A single label is completed from the server's DNS search list, i.e. inside our network.
        raise UnsafeWebhookUrl(f"{name} is not a fully qualified host name")


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise UnsafeWebhookUrl(f"cannot resolve {host}") from None
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canonname, sockaddr in infos:
        address = _ip_literal(str(sockaddr[0]))
        if address is not None and address not in addresses:
            addresses.append(address)
    if not addresses:
        raise UnsafeWebhookUrl(f"cannot resolve {host}")
    return addresses
