"""Secrets at rest that the server must read back — upstream calendar credentials, the inbound-mail webhook
key it verifies signatures with, the signing secrets of agents' webhook endpoints — unlike API keys, which
it only compares against a hash.

Fernet-sealed under settings.SYNC_CREDENTIAL_KEYS (MultiFernet: the first key seals, every key unseals,
so keys rotate without downtime). Without configured keys, one is derived from SECRET_KEY, so a fresh
clone works with nothing set; production sets the keys so that rotating SECRET_KEY locks nothing away.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet


class SealedSecretUnreadable(Exception):
    """No configured key unseals the stored secret (a key was dropped too early)."""


def _fernet() -> MultiFernet:
    keys = list(settings.SYNC_CREDENTIAL_KEYS)
    if not keys:
        # The label predates other secrets sharing the keyring; changing it would orphan what is sealed.
        derived = hashlib.sha256(b"agentcal.sync.credentials:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return MultiFernet([Fernet(key) for key in keys])


def seal_secret(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal_secret(sealed: str) -> str:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken as exc:
        raise SealedSecretUnreadable("no configured key unseals this secret") from exc


def reseal_secret(sealed: str) -> str:
    """The same secret under the current first key (key rotation)."""
    try:
        return _fernet().rotate(sealed.encode()).decode()
    except InvalidToken as exc:
        raise SealedSecretUnreadable("no configured key unseals this secret") from exc


@dataclass
class Resealed:
    count: int = 0
    # Primary keys of rows no configured key unseals: left as they were, for the operator to look at.
    unreadable: list[Any] = field(default_factory=list)


def reseal_column(rows: QuerySet[Any], column: str, *, batch: int = 500) -> Resealed:
    """Every non-empty sealed value of `column` in `rows` under the current first key (key rotation).

    One conditional UPDATE per row, compared with the value read: a value rewritten meanwhile (a secret
    re-issued, an OAuth token refreshed) was sealed under the current keys by its writer and is kept
    as it is, never overwritten with the older secret. A row no key unseals is skipped and named, so
    the rotation of the others still happens and the operator knows not to drop the old key yet.
    """
    done = Resealed()
    last_pk: Any = None
    while True:
        page = rows.exclude(**{column: ""}).order_by("pk")
        if last_pk is not None:
            page = page.filter(pk__gt=last_pk)
        found = list(page.values_list("pk", column)[:batch])
        if not found:
            return done
        # One commit per page, not per row (a commit per row took over twice as long); a writer waiting
        # on one of the page's rows waits a fraction of a second at most.
        with transaction.atomic():
            for pk, sealed in found:
                try:
                    resealed = reseal_secret(sealed)
                except SealedSecretUnreadable:
                    done.unreadable.append(pk)
                    continue
                done.count += rows.model._default_manager.filter(pk=pk, **{column: sealed}).update(
                    **{column: resealed}
                )
        last_pk = found[-1][0]
