"""`AgentCal` and `AsyncAgentCal`: the entry points. Both take the same settings and offer the same
namespaces and helpers; the async one's methods are coroutines."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import httpx

from agentcal_client import _calls
from agentcal_client._transport import DEFAULT_BASE_URL, AsyncTransport, Settings, SyncTransport, api_base_url
from agentcal_client.async_resources import (
    AsyncApprovals,
    AsyncAudit,
    AsyncBookings,
    AsyncCalendars,
    AsyncHolds,
    AsyncInboxNamespace,
)
from agentcal_client.models import Booking, FoundHold, Hold, Identity, MeetingTimes, Slot
from agentcal_client.rate_limits import RateLimit
from agentcal_client.resources import Approvals, Audit, Bookings, Calendars, Holds, InboxNamespace
from agentcal_client.sessions import AsyncHoldSession, HoldSession


def _first_fit(
    calendars: Sequence[str], duration: timedelta, start: datetime, end: datetime
) -> _calls.MeetingSearch:
    return _calls.MeetingSearch(calendars=calendars, duration=duration, start=start, end=end, limit=1)


def _earliest(found: MeetingTimes) -> Slot | None:
    if not found.candidates:
        return None
    first = found.candidates[0]
    return Slot(start_time=first.start_time, end_time=first.end_time)


def _settings(
    api_key: str | None, base_url: str | None, timeout: float, max_retries: int, retry_deadline: float
) -> Settings:
    key = api_key or os.environ.get("AGENTCAL_API_KEY")
    if not key:
        raise ValueError("no API key: pass api_key= or set AGENTCAL_API_KEY")
    if max_retries < 0 or timeout <= 0 or retry_deadline < 0:
        raise ValueError("timeout must be positive, max_retries and retry_deadline not negative")
    url = base_url or os.environ.get("AGENTCAL_BASE_URL") or DEFAULT_BASE_URL
    return Settings(
        api_key=key,
        base_url=api_base_url(url),
        timeout=timeout,
        max_retries=max_retries,
        retry_deadline=retry_deadline,
    )


class AgentCal:
    """The AgentCal API for one agent (one API key).

    >>> client = AgentCal()  # AGENTCAL_API_KEY, AGENTCAL_BASE_URL
    >>> slot = client.find_free_slot(["cal_a", "cal_b"], timedelta(minutes=30), start, end)
    >>> with client.hold("cal_a", slot.start_time, slot.end_time, also_calendars=["cal_b"]) as session:
    ...     booking = session.commit()
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 3,
        retry_deadline: float = 60.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        settings = _settings(api_key, base_url, timeout, max_retries, retry_deadline)
        self._transport = SyncTransport(settings, http_client)
        self.calendars = Calendars(self._transport)
        self.holds = Holds(self._transport)
        self.bookings = Bookings(self._transport)
        self.approvals = Approvals(self._transport)
        self.inbox = InboxNamespace(self._transport)
        self.audit = Audit(self._transport)

    @property
    def base_url(self) -> str:
        return self._transport.settings.base_url

    @property
    def rate_limit(self) -> RateLimit | None:
        """The request budget the last answer reported (None before any answer carried one). Once it
        reaches 0 remaining, the next request waits for a token before it is sent."""
        return self._transport.pacer.last

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> AgentCal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def me(self) -> Identity:
        """Who this key is: its agent (and priorities), workspace, scopes, limits, and any pause."""
        return self._transport.run(_calls.me())

    def find_free_slot(
        self, calendars: Sequence[str], duration: timedelta, start: datetime, end: datetime
    ) -> Slot | None:
        """The earliest span of `duration` in [start, end) free in every calendar (and inside their
        working hours), or None: find_meeting_time's first candidate. Reading is not reserving: hold the
        slot next (a SlotConflict then means someone was faster), or use hold_meeting to do both at once."""
        found = self._transport.run(_calls.find_meeting_time(_first_fit(calendars, duration, start, end)))
        return _earliest(found)

    def find_meeting_time(
        self,
        calendars: Sequence[str],
        duration: timedelta,
        start: datetime,
        end: datetime,
        *,
        optional_calendars: Sequence[str] | None = None,
        min_optional: int | None = None,
        granularity_minutes: int | None = None,
        limit: int | None = None,
        order: str | None = None,
    ) -> MeetingTimes:
        """Spans of `duration` in [start, end) free on every calendar in `calendars`, found by the server
        in one read (`order`: "earliest", the default, or "most_optional": most optional calendars
        free first). No candidates is an answer, not an error: see `reasons`. Reading is not reserving:
        hold a candidate next, with `versions` as `if_version` to hold only if nothing changed."""
        return self._transport.run(
            _calls.find_meeting_time(
                _calls.MeetingSearch(
                    calendars=calendars,
                    duration=duration,
                    start=start,
                    end=end,
                    optional_calendars=optional_calendars,
                    min_optional=min_optional,
                    granularity_minutes=granularity_minutes,
                    limit=limit,
                    order=order,
                )
            )
        )

    def hold_meeting(
        self,
        calendars: Sequence[str],
        duration: timedelta,
        start: datetime,
        end: datetime,
        *,
        optional_calendars: Sequence[str] | None = None,
        min_optional: int | None = None,
        granularity_minutes: int | None = None,
        limit: int | None = None,
        order: str | None = None,
        ttl_seconds: int | None = None,
        priority: int | None = None,
        title: str | None = None,
        attendees: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> FoundHold:
        """Find a time as find_meeting_time does and hold it on every calendar of `calendars`, in one
        write: the server picks the best candidate it can still hold under the calendars' locks (a time
        taken meanwhile is skipped, never double-held; nothing is taken over). The FoundHold says which
        candidate it got (`candidate_rank`, 1 for the best) and the window searched; commit or release it
        as any hold (`holds.commit`, `holds.release`). Raises NoSlotFound (`.reasons`) when no time suits."""
        return self._transport.run(
            _calls.hold_meeting(
                _calls.MeetingSearch(
                    calendars=calendars,
                    duration=duration,
                    start=start,
                    end=end,
                    optional_calendars=optional_calendars,
                    min_optional=min_optional,
                    granularity_minutes=granularity_minutes,
                    limit=limit,
                    order=order,
                ),
                ttl_seconds=ttl_seconds,
                priority=priority,
                title=title,
                attendees=attendees,
                metadata=metadata,
            ),
            idempotency_key=idempotency_key,
        )

    def move_booking(
        self,
        booking_id: str,
        start_time: datetime,
        end_time: datetime,
        *,
        fencing_token: int | None = None,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        """Move one of this agent's bookings to [start_time, end_time) on every one of its calendars at
        once: the same booking id on the new span, a new fencing token, the bump window restarted; on any
        refusal nothing changes (SlotConflict carries `alternatives`). A booking bumped less than 24 h ago
        comes back `committed`; later, BookingNotLive (`.booking_status`, `.bumped_at`). `fencing_token`:
        the booking's current one, to move only what this agent last saw; `if_match`: the primary
        calendar's version (sent as `If-Match`)."""
        return self.bookings.move(
            booking_id,
            start_time,
            end_time,
            fencing_token=fencing_token,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def reschedule_booking(
        self,
        booking_id: str,
        *,
        after: datetime,
        before: datetime,
        fencing_token: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        """Move one of this agent's bookings to the earliest time in [after, before) that suits every one
        of its calendars (their working hours, buffers, notice and busy time, its own time aside), for as
        long as it lasts now — the server finds it and moves it under the calendars' locks. NoSlotFound
        (`.reasons`) if there is none; otherwise as move_booking."""
        booking = self.bookings.get(booking_id)
        search = _calls.earliest_time_for(booking, after, before)
        call = _calls.booking_move_to_found_time(booking_id, search, fencing_token=fencing_token)
        return self._transport.run(call, idempotency_key=idempotency_key)

    def hold(
        self,
        calendar_id: str,
        start: datetime,
        end: datetime,
        *,
        priority: int | None = None,
        ttl_seconds: int | None = None,
        title: str | None = None,
        attendees: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        also_calendars: Sequence[str] | None = None,
    ) -> HoldSession:
        """A hold kept alive while the `with` block runs, released when it ends uncommitted
        (see agentcal_client.sessions)."""

        def create() -> Hold:
            return self.holds.create(
                calendar_id,
                start,
                end,
                ttl_seconds=ttl_seconds,
                priority=priority,
                title=title,
                attendees=attendees,
                metadata=metadata,
                also_calendars=also_calendars,
            )

        return HoldSession(self._transport, create, ttl_seconds=ttl_seconds)


class AsyncAgentCal:
    """The asyncio twin of AgentCal: the same arguments, namespaces and helpers, as coroutines."""

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 3,
        retry_deadline: float = 60.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        settings = _settings(api_key, base_url, timeout, max_retries, retry_deadline)
        self._transport = AsyncTransport(settings, http_client)
        self.calendars = AsyncCalendars(self._transport)
        self.holds = AsyncHolds(self._transport)
        self.bookings = AsyncBookings(self._transport)
        self.approvals = AsyncApprovals(self._transport)
        self.inbox = AsyncInboxNamespace(self._transport)
        self.audit = AsyncAudit(self._transport)

    @property
    def base_url(self) -> str:
        return self._transport.settings.base_url

    @property
    def rate_limit(self) -> RateLimit | None:
        """See AgentCal.rate_limit."""
        return self._transport.pacer.last

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncAgentCal:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def me(self) -> Identity:
        """Who this key is: its agent (and priorities), workspace, scopes, limits, and any pause."""
        return await self._transport.run(_calls.me())

    async def find_free_slot(
        self, calendars: Sequence[str], duration: timedelta, start: datetime, end: datetime
    ) -> Slot | None:
        """See AgentCal.find_free_slot."""
        found = await self._transport.run(
            _calls.find_meeting_time(_first_fit(calendars, duration, start, end))
        )
        return _earliest(found)

    async def find_meeting_time(
        self,
        calendars: Sequence[str],
        duration: timedelta,
        start: datetime,
        end: datetime,
        *,
        optional_calendars: Sequence[str] | None = None,
        min_optional: int | None = None,
        granularity_minutes: int | None = None,
        limit: int | None = None,
        order: str | None = None,
    ) -> MeetingTimes:
        """See AgentCal.find_meeting_time."""
        return await self._transport.run(
            _calls.find_meeting_time(
                _calls.MeetingSearch(
                    calendars=calendars,
                    duration=duration,
                    start=start,
                    end=end,
                    optional_calendars=optional_calendars,
                    min_optional=min_optional,
                    granularity_minutes=granularity_minutes,
                    limit=limit,
                    order=order,
                )
            )
        )

    async def hold_meeting(
        self,
        calendars: Sequence[str],
        duration: timedelta,
        start: datetime,
        end: datetime,
        *,
        optional_calendars: Sequence[str] | None = None,
        min_optional: int | None = None,
        granularity_minutes: int | None = None,
        limit: int | None = None,
        order: str | None = None,
        ttl_seconds: int | None = None,
        priority: int | None = None,
        title: str | None = None,
        attendees: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> FoundHold:
        """See AgentCal.hold_meeting."""
        return await self._transport.run(
            _calls.hold_meeting(
                _calls.MeetingSearch(
                    calendars=calendars,
                    duration=duration,
                    start=start,
                    end=end,
                    optional_calendars=optional_calendars,
                    min_optional=min_optional,
                    granularity_minutes=granularity_minutes,
                    limit=limit,
                    order=order,
                ),
                ttl_seconds=ttl_seconds,
                priority=priority,
                title=title,
                attendees=attendees,
                metadata=metadata,
            ),
            idempotency_key=idempotency_key,
        )

    async def move_booking(
        self,
        booking_id: str,
        start_time: datetime,
        end_time: datetime,
        *,
        fencing_token: int | None = None,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        """See AgentCal.move_booking."""
        return await self.bookings.move(
            booking_id,
            start_time,
            end_time,
            fencing_token=fencing_token,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    async def reschedule_booking(
        self,
        booking_id: str,
        *,
        after: datetime,
        before: datetime,
        fencing_token: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        """See AgentCal.reschedule_booking."""
        booking = await self.bookings.get(booking_id)
        search = _calls.earliest_time_for(booking, after, before)
        call = _calls.booking_move_to_found_time(booking_id, search, fencing_token=fencing_token)
        return await self._transport.run(call, idempotency_key=idempotency_key)

    def hold(
        self,
        calendar_id: str,
        start: datetime,
        end: datetime,
        *,
        priority: int | None = None,
        ttl_seconds: int | None = None,
        title: str | None = None,
        attendees: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        also_calendars: Sequence[str] | None = None,
    ) -> AsyncHoldSession:
        """`async with client.hold(...) as session:` — see AgentCal.hold."""

        async def create() -> Hold:
            return await self.holds.create(
                calendar_id,
                start,
                end,
                ttl_seconds=ttl_seconds,
                priority=priority,
                title=title,
                attendees=attendees,
                metadata=metadata,
                also_calendars=also_calendars,
            )

        return AsyncHoldSession(self._transport, create, ttl_seconds=ttl_seconds)
