"""Secrets shown once (a new API key, the inbound webhook's signing secret), the post/redirect/get way.

The POST that makes a secret keeps it in the person's server-side session, sealed (agentcal.sealing), and
answers 303 to a GET page; that page takes it out of the session as it renders it. So a reload shows
"already shown" and mints nothing, the secret never appears in a URL or a Location header, and the
session row holds it only between the POST and the GET that follows — encrypted even then. A secret the
person never came back for is dropped after PENDING_TTL.

After the display a small marker (no secret in it) remembers that the slot was shown, so the page can
say "already shown" rather than "nothing here".
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import resolve_url

from agentcal.sealing import SealedSecretUnreadable, seal_secret, unseal_secret

PENDING = "one_time_secrets"
SHOWN = "one_time_secrets_shown"
PENDING_TTL = 10 * 60  # seconds a secret waits for its page
SHOWN_TTL = 60 * 60  # seconds the "already shown" marker is kept
MAX_SHOWN = 20


@dataclass
class Reveal:
    """What a one-time page renders: the secret (the first time) or when it was shown (afterwards)."""

    secret: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    shown_at: datetime | None = None

    @property
    def already_shown(self) -> bool:
        return not self.secret and self.shown_at is not None


def see_other(to: str, *args: Any) -> HttpResponseRedirect:
    """303 See Other: the browser follows with a GET, and a reload repeats that GET, not the POST."""
    response = HttpResponseRedirect(resolve_url(to, *args))
    response.status_code = 303
    return response


def _fresh(entries: dict[str, Any], ttl: int, now: float) -> dict[str, Any]:
    return {slot: entry for slot, entry in entries.items() if now - entry["at"] < ttl}


def keep_for_display(request: HttpRequest, slot: str, secret: str, **facts: Any) -> None:
    """Keep `secret` for the next GET of `slot`'s page. `facts` (non-secret, JSON-able) go with it."""
    now = time.time()
    pending = _fresh(request.session.get(PENDING, {}), PENDING_TTL, now)
    pending[slot] = {"sealed": seal_secret(secret), "facts": facts, "at": now}
    request.session[PENDING] = pending


def take_for_display(request: HttpRequest, slot: str) -> Reveal:
    """The secret kept for `slot`, removed from the session by this call; else when it was shown. Only a
    GET spends it: a HEAD (which has no page to show it on) leaves it waiting."""
    if request.method != "GET":
        return Reveal()
    now = time.time()
    pending = _fresh(request.session.get(PENDING, {}), PENDING_TTL, now)
    shown = _fresh(request.session.get(SHOWN, {}), SHOWN_TTL, now)
    entry = pending.pop(slot, None)
    reveal = Reveal()
    if entry is not None:
        # Sealed under a key since dropped: the page says it cannot be shown.
        with contextlib.suppress(SealedSecretUnreadable):
            reveal = Reveal(secret=unseal_secret(entry["sealed"]), facts=entry["facts"])
        shown[slot] = {"at": now}
        shown = dict(sorted(shown.items(), key=lambda item: item[1]["at"])[-MAX_SHOWN:])
    elif slot in shown:
        reveal = Reveal(shown_at=datetime.fromtimestamp(shown[slot]["at"], tz=UTC))
    for name, entries in ((PENDING, pending), (SHOWN, shown)):
        if entries:
            request.session[name] = entries
        else:
            request.session.pop(name, None)
    return reveal
