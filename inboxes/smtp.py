"""The inbound SMTP listener (aiosmtpd): who may receive mail here, how many sessions it holds and for how
long, how fast a peer may send, how many recipients one message may name, and the moment a message is
accepted.

aiosmtpd runs the dialogue on an asyncio loop in its own thread; every database call goes to a worker
thread (sync_to_async, thread_sensitive=False) and closes its connection when done, so the listener
holds no connection between messages. A message's DATA is spooled to a temporary file past a small
buffer, so sessions in the middle of DATA hold disk, not memory.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Callable
from typing import IO, Any, TypeVar

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import MISSING, SMTP, syntax
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections

from agentcal.metrics import INBOUND_SMTP_SESSIONS_CLOSED
from agentcal.rate_limits import RateLimiter
from inboxes.services import inbound_recipient_refusal, inbound_store

logger = logging.getLogger(__name__)

T = TypeVar("T")

# RCPT commands one message may have, accepted or refused: each costs a lookup (and a refused one an
# audit row), so a client naming a hundred thousand must not cost as many. A hundred is the least RFC 5321
# lets a server take (§4.5.3.1.8); the client sends the rest in another transaction.
MAX_RECIPIENTS_PER_MESSAGE = 100
TOO_MANY_RECIPIENTS = "452 4.5.3 Too many recipients"
LINE_TOO_LONG = "500 Line too long (see RFC5321 4.5.3.1.6)"  # aiosmtpd's words

# DATA kept in memory before the rest goes to a temporary file: most mail (text, a small attachment) never
# touches the disk, and a session in the middle of a 10 MiB DATA holds a quarter of a MiB, not ten.
SPOOL_IN_MEMORY_BYTES = 256 * 1024
# A peer that stops reading keeps our closing 421, and so its connection, unsent: after this it is cut.
CLOSE_GRACE_SECONDS = 5.0


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


class SessionCounts:
    """The sessions one listener holds, in all and per peer address. Touched only on the listener's event
    loop (connection_made / connection_lost), so without a lock."""

    def __init__(self, *, max_sessions: int, max_sessions_per_ip: int) -> None:
        self.max_sessions = max_sessions
        self.max_sessions_per_ip = max_sessions_per_ip
        self.open = 0
        self.open_per_ip: dict[str, int] = {}

    def claim(self, ip: str) -> str:
        """Why a session from `ip` may not start now (the metric's reason), or an empty string when it may:
        then it counts until `release`."""
        if self.open >= self.max_sessions:
            return "over_sessions"
        if self.open_per_ip.get(ip, 0) >= self.max_sessions_per_ip:
            return "over_sessions_per_ip"
        self.open += 1
        self.open_per_ip[ip] = self.open_per_ip.get(ip, 0) + 1
        return ""

    def release(self, ip: str) -> None:
        self.open -= 1
        if self.open_per_ip[ip] > 1:
            self.open_per_ip[ip] -= 1
        else:
            del self.open_per_ip[ip]  # peers come and go: only addresses with a session open are kept


class InboundSMTP(SMTP):
    """aiosmtpd's SMTP session with limits: how many sessions (a session past them is answered 421 at the
    greeting, RFC 5321 §3.8), how long one may idle (aiosmtpd's `timeout`, which a line of DATA restarts
    too) and last in all, and DATA spooled to a temporary file past SPOOL_IN_MEMORY_BYTES. DATA is kept
    as bytes (aiosmtpd's decode_data is not offered): the raw message is stored as received."""

    def __init__(
        self, handler: Any, *, sessions: SessionCounts, max_session_seconds: float, **kwargs: Any
    ) -> None:
        super().__init__(handler, decode_data=False, **kwargs)
        self.sessions = sessions
        self.max_session_seconds = max_session_seconds
        self.counted_ip: str | None = None
        self.refusal = ""
        self.deadline: asyncio.TimerHandle | None = None
        self.last_data_line_at = 0.0
        self.storing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # STARTTLS makes the TLS transport "connected" again: the session was counted at the first.
        starttls = self._original_transport is not None
        super().connection_made(transport)
        if starttls:
            return
        assert self.session is not None
        ip = _peer_ip(self.session)
        refused = self.sessions.claim(ip)
        if refused:
            INBOUND_SMTP_SESSIONS_CLOSED.labels(refused).inc()
            logger.info("refused an SMTP session from %s: %s", ip, refused)
            whose = " from your address" if refused == "over_sessions_per_ip" else ""
            self.refusal = f"421 4.7.0 {self.hostname} Too many sessions{whose}, try again later"
            return
        self.counted_ip = ip
        self.deadline = self.loop.call_later(self.max_session_seconds, self._session_deadline)

    def connection_lost(self, error: Exception | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        if self.counted_ip is not None:
            self.sessions.release(self.counted_ip)
            self.counted_ip = None
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if self.refusal:
            # The 421 takes the greeting's place; the client tries again later (RFC 5321 §3.8).
            await self.push(self.refusal)
            assert self.transport is not None
            self.transport.close()
            return
        await super()._handle_client()

    def _timeout_cb(self) -> None:
        # aiosmtpd restarts its idle timer at every command; a line of DATA is no idling either, and
        # neither is the wait for a message to be stored.
        idle_for = self.loop.time() - self.last_data_line_at
        if self.storing or idle_for < self._timeout_duration:
            wait = self._timeout_duration if self.storing else self._timeout_duration - idle_for
            self._timeout_handle = self.loop.call_later(wait, self._timeout_cb)
            return
        self._close_with(f"421 4.4.2 {self.hostname} Idle too long, closing", reason="idle")

    def _session_deadline(self) -> None:
        if self.storing:
            # Cut now, the sender would not hear that its message was accepted, and would send it again.
            self.deadline = self.loop.call_later(1.0, self._session_deadline)
            return
        self._close_with(f"421 4.4.2 {self.hostname} Session too long, closing", reason="too_long")

    def _close_with(self, reply: str, *, reason: str) -> None:
        transport = self.transport
        if not isinstance(transport, asyncio.Transport) or transport.is_closing():
            return  # closed already
        INBOUND_SMTP_SESSIONS_CLOSED.labels(reason).inc()
        logger.info("closed an SMTP session from %s: %s", self.counted_ip, reason)
        # RFC 5321 §3.8: a server closing a session of its own accord says 421 first.
        transport.write(reply.encode("ascii") + b"\r\n")
        transport.close()  # connection_lost follows: the slot is released, the spool removed
        self.loop.call_later(CLOSE_GRACE_SECONDS, transport.abort)

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:  # noqa: N802 (aiosmtpd's command names)
        """aiosmtpd's DATA, with the message spooled rather than kept as a list of lines."""
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        # Removed when closed: at the end of DATA, or when the session ends in the middle of it.
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES) as spool:
            refusal = await self._receive_data(spool)
            if refusal:
                self._set_post_data_state()
                await self.push(refusal)
                return
            spool.seek(0)
            # At most data_size_limit, and only until the handler has stored it.
            content = spool.read()
        self.envelope.content = self.envelope.original_content = content
        self.storing = True
        try:
            status = await self._call_handler_hook("DATA")
        finally:
            self.storing = False
        self._set_post_data_state()
        await self.push("250 OK" if status is MISSING else status)

    async def _receive_data(self, spool: IO[bytes]) -> str:
        """Read DATA up to its final dot into `spool`, dot-unstuffed (RFC 5321 §4.5.2); "" when it may be
        delivered, else the reply refusing it. As aiosmtpd does, a refused DATA is still read to its end
        (the reply may only come then, RFC 5321 §4.2.5), but nothing more of it is kept."""
        limit = self.data_size_limit
        received = 0
        refusal = ""
        in_long_line = False  # a piece of a line longer than the reader takes at once, without its CRLF
        while True:
            try:
                line = await self._reader.readuntil(b"\r\n")
            except asyncio.LimitOverrunError as overrun:
                line = await self._reader.read(overrun.consumed)
            self.last_data_line_at = self.loop.time()
            if line == b".\r\n" and not in_long_line:
                return refusal
            received += len(line)
            in_long_line = not line.endswith(b"\r\n")
            if refusal:
                continue
            # In aiosmtpd's order, so a message refused for two reasons gets the same reply as before.
            if in_long_line:
                refusal = LINE_TOO_LONG
            elif limit and received > limit:
                refusal = "552 Error: Too much mail data"
            elif len(line) > self.line_length_limit:
                refusal = LINE_TOO_LONG
            if refusal:
                spool.seek(0)
                spool.truncate()  # nothing of a refused message is kept
                continue
            spool.write(line[1:] if line.startswith(b".") else line)


class InboundController(Controller):
    """aiosmtpd's Controller, making an InboundSMTP for each connection, all counted together."""

    def __init__(self, handler: Any, *, sessions: SessionCounts, max_session_seconds: float, **kwargs: Any):
        super().__init__(handler, **kwargs)
        self.sessions = sessions
        self.max_session_seconds = max_session_seconds

    def factory(self) -> InboundSMTP:
        return InboundSMTP(
            self.handler,
            sessions=self.sessions,
            max_session_seconds=self.max_session_seconds,
            **self.SMTP_kwargs,
        )


def inbound_controller(host: str, port: int, *, per_minute: int | None = None) -> Controller:
    """The listener, not yet started (`.start()` runs it in a thread of its own)."""
    return InboundController(
        InboundHandler(per_minute=per_minute),
        sessions=SessionCounts(
            max_sessions=settings.INBOUND_SMTP_MAX_SESSIONS,
            max_sessions_per_ip=settings.INBOUND_SMTP_MAX_SESSIONS_PER_IP,
        ),
        max_session_seconds=settings.INBOUND_SMTP_MAX_SESSION_SECONDS,
        hostname=host,
        port=port,
        data_size_limit=settings.INBOUND_MAX_MESSAGE_BYTES,
        timeout=settings.INBOUND_SMTP_IDLE_TIMEOUT_SECONDS,
    )
