"""Sender authentication: what a receiving server we trust (INBOUND_TRUSTED_AUTHSERV_IDS) wrote in its
Authentication-Results headers (RFC 8601) about SPF, DKIM and DMARC, and whether a mail's From address is
known to be its sender's (`sender_authenticated`), not only claimed. A header naming any other host may
have been written by the sender, and is ignored. With no trusted server configured, no stranger's mail is
authenticated.
"""

from __future__ import annotations

import email.parser
import email.policy
import re
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from inboxes.models import InboundRaw

AUTH_METHODS = ("spf", "dkim", "dmarc")


def authentication_results(headers: list[str], *, trusted: frozenset[str]) -> dict[str, str]:
    """SPF, DKIM and DMARC verdicts from Authentication-Results headers (RFC 8601) added by a trusted
    host (the authserv-id before the first ";"): the first one found for each method, the topmost header
    first (the one the receiving server added last); "none" if absent. A header naming any other host
    may have been written by the sender, and is ignored."""
    verdicts = dict.fromkeys(AUTH_METHODS, "none")
    seen: set[str] = set()
    for header in headers:
        authserv_id = header.split(";", 1)[0].strip().split()[0].lower() if header.strip() else ""
        if authserv_id not in trusted:
            continue
        for method, result in re.findall(r"\b(spf|dkim|dmarc)\s*=\s*([a-z]+)", header, flags=re.IGNORECASE):
            method = method.lower()
            if method not in seen:
                seen.add(method)
                verdicts[method] = result.lower()[:32]
    return verdicts


def sender_authenticated(*, raw: InboundRaw, sender: str, auth_results: dict[str, str]) -> bool:
    """Whether the mail's From address (`sender`) is known to be its sender's, not only claimed: a trusted
    receiving server found DMARC passing, or a valid DKIM signature of the From address's domain; or the
    mail never came from outside at all — one of this installation's agents wrote it and our own local
    delivery put it in the inbox (InboundRaw.local_delivery, set only by that code path, never by anything
    in the bytes). SPF alone does not count: it vouches for the envelope sender, not for From."""
    if raw.local_delivery:
        return True
    if not sender:
        return False
    if auth_results.get("dmarc") == "pass":
        return True
    domain = sender.rpartition("@")[2].lower()
    # DKIM proves who signed, which may be any domain: only a signature of the From address's own domain
    # (or of a domain it belongs to, as DMARC's relaxed alignment allows) says anything about From.
    return any(domain == signer or domain.endswith(f".{signer}") for signer in _dkim_signers(bytes(raw.raw)))


_DKIM_PASS = re.compile(r"^\s*dkim\s*=\s*pass\b(.*)$", re.IGNORECASE)
_SIGNER = re.compile(r"\bheader\.(?:d\s*=\s*|i\s*=\s*[^\s;@]*@)([a-z0-9.-]+)", re.IGNORECASE)


def _dkim_signers(raw: bytes) -> set[str]:
    """The domains (header.d, or header.i's) whose DKIM signature a trusted receiving server found valid,
    from its Authentication-Results (RFC 8601); the same trust rule as authentication_results."""
    trusted = frozenset(settings.INBOUND_TRUSTED_AUTHSERV_IDS)
    try:
        headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(raw)
        values = [" ".join(str(v).split()) for v in headers.get_all("Authentication-Results") or []]
    except Exception:  # a stranger's bytes: unreadable headers vouch for nothing
        return set()
    signers: set[str] = set()
    for value in values:
        authserv_id, _, results = value.partition(";")
        names = authserv_id.split()
        if names and names[0].lower() in trusted:
            for result in results.split(";"):
                passed = _DKIM_PASS.match(result)
                if passed:
                    signers.update(d.lower().strip(".") for d in _SIGNER.findall(passed.group(1)))
    return signers - {""}
