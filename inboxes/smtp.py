"""The inbound SMTP listener's handler (aiosmtpd): who may receive mail here, how fast a peer may send,
how many recipients one message may name, and the moment a message is accepted.

aiosmtpd runs the dialogue on an asyncio loop in its own thread; every database call goes to a worker
thread (sync_to_async, thread_sensitive=False) and closes its connection when done, so the listener
holds no connection between messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from aiosmtpd.controller import Controller
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections

from agentcal.rate_limits import RateLimiter
from inboxes.services import inbound_recipient_refusal, inbound_store

logger = logging.getLogger(__name__)

T = TypeVar("T")

# RCPT commands one message may have, accepted or refused: each costs a lookup (and a refused one an
# audit row), so a client naming a hundred thousand must not cost as many. A hundred is the least RFC 5321
# lets a server take (§4.5.3.1.8); the client sends the rest in another transaction.
MAX_RECIPIENTS_PER_MESSAGE = 100
TOO_MANY_RECIPIENTS = "452 4.5.3 Too many recipients"


def _with_own_connection(function: Callable[..., T]) -> Callable[..., T]:
    def run(*args: Any, **kwargs: Any) -> T:
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    return run


async def _in_thread(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    return await sync_to_async(_with_own_connection(function), thread_sensitive=False)(*args, **kwargs)


def _peer_ip(session: Any) -> str:
    peer = session.peer
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer or "")


class InboundHandler:
    def __init__(self, *, per_minute: int | None = None) -> None:
        self.limiter = RateLimiter(per_minute or settings.INBOUND_MAX_MESSAGES_PER_MINUTE_PER_IP)

    async def handle_MAIL(  # noqa: N802 (aiosmtpd's hook names)
        self, server: Any, session: Any, envelope: Any, address: str, mail_options: list[str]
    ) -> str:
        if not self.limiter.allow(_peer_ip(session)):
            return "421 4.7.0 Too many messages from your address, try again later"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(  # noqa: N802
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        # Counted on the envelope: a new transaction (after DATA, or RSET) starts a new one.
        envelope.rcpt_attempts = getattr(envelope, "rcpt_attempts", 0) + 1
        if envelope.rcpt_attempts > MAX_RECIPIENTS_PER_MESSAGE:
            return TOO_MANY_RECIPIENTS
        try:
            refusal = await _in_thread(
                inbound_recipient_refusal, address, sender=envelope.mail_from or "", peer=_peer_ip(session)
            )
        except Exception:
            # The database is unreachable: a temporary failure, so the sender tries again later.
            logger.exception("could not check an inbound recipient")
            return "451 4.3.0 Temporary failure, try again later"
        if refusal is not None:
            return refusal.smtp_reply
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        raw = envelope.original_content or envelope.content
        if isinstance(raw, str):
            raw = raw.encode("utf-8", errors="surrogateescape")
        try:
            raw_id = await _in_thread(
                inbound_store,
                raw=raw,
                envelope_from=envelope.mail_from or "",
                recipients=list(envelope.rcpt_tos),
                peer_ip=_peer_ip(session),
            )
        except Exception:
            # Not stored, so not accepted: the sender keeps the message and retries.
            logger.exception("could not store an inbound message")
            return "451 4.3.0 Temporary failure, try again later"
        logger.info("accepted inbound message %s for %s", raw_id, ", ".join(envelope.rcpt_tos))
        return "250 Message accepted"


def inbound_controller(host: str, port: int, *, per_minute: int | None = None) -> Controller:
    """The listener, not yet started (`.start()` runs it in a thread of its own)."""
    return Controller(
        InboundHandler(per_minute=per_minute),
        hostname=host,
        port=port,
        data_size_limit=settings.INBOUND_MAX_MESSAGE_BYTES,
        # The raw bytes are stored as received; decoding is the parser's job.
        decode_data=False,
    )
