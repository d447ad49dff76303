"""The synchronous client's namespaces: `client.calendars`, `.holds`, `.bookings`, `.approvals`, `.inbox`,
`.audit`. Each method is one API call (described in _calls.py) run through the retrying transport.
Writes take `idempotency_key=` to pin the key yourself; by default each call makes its own."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from agentcal_client import _calls
from agentcal_client._calls import PageCalls
from agentcal_client._transport import SyncTransport
from agentcal_client.errors import ApprovalWaitTimeout
from agentcal_client.models import (
    Approval,
    AuditRecord,
    Availability,
    Booking,
    Calendar,
    Hold,
    Inbox,
    Message,
    Model,
    QueuedMessage,
    Thread,
    ThreadDetail,
)

M = TypeVar("M", bound=Model)


def iterate(transport: SyncTransport, pages: PageCalls[M]) -> Iterator[M]:
    """Every item of a listing, fetching each next page only when the previous one is used up."""
    cursor: str | None = None
    while True:
        page = transport.run(pages(cursor))
        yield from page.results
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


class _Namespace:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport


class Calendars(_Namespace):
    def list(self, *, limit: int | None = None) -> Iterator[Calendar]:
        return iterate(self._transport, _calls.calendars_list(limit=limit))

    def get(self, calendar_id: str) -> Calendar:
        return self._transport.run(_calls.calendar_get(calendar_id))

    def create(
        self,
        name: str,
        *,
        timezone: str | None = None,
        slot_minutes: int | None = None,
        hold_ttl_seconds: int | None = None,
        bump_window_seconds: int | None = None,
        max_booking_minutes: int | None = None,
        working_hours: dict[str, Any] | None = None,
        date_overrides: dict[str, Any] | None = None,
        buffer_before_minutes: int | None = None,
        buffer_after_minutes: int | None = None,
        min_notice_minutes: int | None = None,
        idempotency_key: str | None = None,
    ) -> Calendar:
        call = _calls.calendar_create(
            name=name,
            timezone=timezone,
            slot_minutes=slot_minutes,
            hold_ttl_seconds=hold_ttl_seconds,
            bump_window_seconds=bump_window_seconds,
            max_booking_minutes=max_booking_minutes,
            working_hours=working_hours,
            date_overrides=date_overrides,
            buffer_before_minutes=buffer_before_minutes,
            buffer_after_minutes=buffer_after_minutes,
            min_notice_minutes=min_notice_minutes,
        )
        return self._transport.run(call, idempotency_key=idempotency_key)

    def update(
        self,
        calendar_id: str,
        *,
        name: str | None = None,
        timezone: str | None = None,
        slot_minutes: int | None = None,
        hold_ttl_seconds: int | None = None,
        bump_window_seconds: int | None = None,
        max_booking_minutes: int | None = None,
        working_hours: dict[str, Any] | None = None,
        date_overrides: dict[str, Any] | None = None,
        buffer_before_minutes: int | None = None,
        buffer_after_minutes: int | None = None,
        min_notice_minutes: int | None = None,
        clear_working_hours: bool = False,
        idempotency_key: str | None = None,
    ) -> Calendar:
        call = _calls.calendar_update(
            calendar_id,
            name=name,
            timezone=timezone,
            slot_minutes=slot_minutes,
            hold_ttl_seconds=hold_ttl_seconds,
            bump_window_seconds=bump_window_seconds,
            max_booking_minutes=max_booking_minutes,
            working_hours=working_hours,
            date_overrides=date_overrides,
            buffer_before_minutes=buffer_before_minutes,
            buffer_after_minutes=buffer_after_minutes,
            min_notice_minutes=min_notice_minutes,
            clear_working_hours=clear_working_hours,
        )
        return self._transport.run(call, idempotency_key=idempotency_key)

    def availability(
        self, calendar_id: str, start: datetime, end: datetime, *, duration: timedelta | None = None
    ) -> Availability:
        return self._transport.run(_calls.availability(calendar_id, start, end, duration=duration))


class Holds(_Namespace):
    def create(
        self,
        calendar_id: str,
        start: datetime,
        end: datetime,
        *,
        ttl_seconds: int | None = None,
        priority: int | None = None,
        title: str | None = None,
        attendees: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        also_calendars: Sequence[str] | None = None,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> Hold:
        call = _calls.hold_create(
            calendar_id,
            start,
            end,
            ttl_seconds=ttl_seconds,
            priority=priority,
            title=title,
            attendees=attendees,
            metadata=metadata,
            also_calendars=also_calendars,
            if_version=if_version,
        )
        return self._transport.run(call, idempotency_key=idempotency_key)

    def get(self, hold_id: str) -> Hold:
        return self._transport.run(_calls.hold_get(hold_id))

    def heartbeat(
        self,
        hold_id: str,
        hold_token: str,
        *,
        ttl_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Hold:
        call = _calls.hold_extend(hold_id, hold_token, ttl_seconds=ttl_seconds)
        return self._transport.run(call, idempotency_key=idempotency_key)

    def release(self, hold_id: str, hold_token: str, *, idempotency_key: str | None = None) -> Hold:
        return self._transport.run(_calls.hold_release(hold_id, hold_token), idempotency_key=idempotency_key)

    def commit(
        self, hold: Hold, *, fencing_token: int | None = None, idempotency_key: str | None = None
    ) -> Booking:
        call = _calls.hold_commit(hold, fencing_token=fencing_token)
        return self._transport.run(call, idempotency_key=idempotency_key)


class Bookings(_Namespace):
    def commit(
        self,
        calendar_id: str,
        start: datetime,
        end: datetime,
        *,
        priority: int | None = None,
        title: str | None = None,
        attendees: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        also_calendars: Sequence[str] | None = None,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        call = _calls.booking_commit(
            calendar_id,
            start,
            end,
            priority=priority,
            title=title,
            attendees=attendees,
            metadata=metadata,
            also_calendars=also_calendars,
            if_version=if_version,
        )
        return self._transport.run(call, idempotency_key=idempotency_key)

    def get(self, booking_id: str) -> Booking:
        return self._transport.run(_calls.booking_get(booking_id))

    def list(
        self,
        calendar_id: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Booking]:
        pages = _calls.bookings_list(calendar_id, start=start, end=end, status=status, limit=limit)
        return iterate(self._transport, pages)

    def cancel(self, booking_id: str, *, idempotency_key: str | None = None) -> Booking:
        return self._transport.run(_calls.booking_cancel(booking_id), idempotency_key=idempotency_key)

    def move(
        self,
        booking_id: str,
        start: datetime,
        end: datetime,
        *,
        fencing_token: int | None = None,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        call = _calls.booking_move(booking_id, start, end, fencing_token=fencing_token, if_match=if_match)
        return self._transport.run(call, idempotency_key=idempotency_key)


class Approvals(_Namespace):
    def request(
        self,
        summary: str,
        evidence: dict[str, Any],
        *,
        hold_id: str | None = None,
        state: Any = None,
        expires_in_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Approval:
        call = _calls.approval_request(
            summary, evidence, hold_id=hold_id, state=state, expires_in_seconds=expires_in_seconds
        )
        return self._transport.run(call, idempotency_key=idempotency_key)

    def get(self, approval_id: str) -> Approval:
        return self._transport.run(_calls.approval_get(approval_id))

    def list(self, *, status: str | None = None, limit: int | None = None) -> Iterator[Approval]:
        return iterate(self._transport, _calls.approvals_list(status=status, limit=limit))

    def cancel(self, approval_id: str, *, idempotency_key: str | None = None) -> Approval:
        return self._transport.run(_calls.approval_cancel(approval_id), idempotency_key=idempotency_key)

    def wait(
        self,
        approval_id: str,
        *,
        timeout: float = 600.0,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
    ) -> Approval:
        """Poll until a person decides (or the approval expires or is cancelled); returns it then.
        Raises ApprovalWaitTimeout when `timeout` seconds pass with the approval still pending."""
        started = time.monotonic()
        deadline = started + timeout
        interval = poll_interval
        while True:
            approval = self.get(approval_id)
            if not approval.pending:
                return approval
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApprovalWaitTimeout(approval, time.monotonic() - started)
            time.sleep(min(interval, left))
            interval = min(max_poll_interval, interval * 2)


class InboxNamespace(_Namespace):
    def get(self) -> Inbox:
        return self._transport.run(_calls.inbox_get())

    def threads(self, *, limit: int | None = None) -> Iterator[Thread]:
        return iterate(self._transport, _calls.inbox_threads(limit=limit))

    def thread(self, thread_id: str) -> ThreadDetail:
        return self._transport.run(_calls.inbox_thread(thread_id))

    def messages(
        self, *, thread: str | None = None, since: datetime | None = None, limit: int | None = None
    ) -> Iterator[Message]:
        return iterate(self._transport, _calls.inbox_messages(thread=thread, since=since, limit=limit))

    def message(self, message_id: str) -> Message:
        return self._transport.run(_calls.inbox_message(message_id))

    def raw(self, message_id: str) -> bytes:
        return self._transport.run(_calls.inbox_raw(message_id))

    def attachment(self, message_id: str, attachment_id: str) -> bytes:
        return self._transport.run(_calls.inbox_attachment(message_id, attachment_id))

    def reply(
        self,
        message_id: str,
        text: str,
        *,
        html: str | None = None,
        reply_all: bool = False,
        idempotency_key: str | None = None,
    ) -> QueuedMessage:
        call = _calls.inbox_reply(message_id, text, html=html, reply_all=reply_all)
        return self._transport.run(call, idempotency_key=idempotency_key)

    def send(
        self,
        to: Sequence[str],
        subject: str,
        text: str,
        *,
        cc: Sequence[str] | None = None,
        html: str | None = None,
        invite_booking_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> QueuedMessage:
        call = _calls.inbox_send(to, subject, text, cc=cc, html=html, invite_booking_id=invite_booking_id)
        return self._transport.run(call, idempotency_key=idempotency_key)


class Audit(_Namespace):
    def list(
        self,
        *,
        event_type: str | None = None,
        agent: str | None = None,
        calendar: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        overlaps_start: datetime | None = None,
        overlaps_end: datetime | None = None,
        limit: int | None = None,
    ) -> Iterator[AuditRecord]:
        pages = _calls.audit_list(
            event_type=event_type,
            agent=agent,
            calendar=calendar,
            outcome=outcome,
            since=since,
            until=until,
            overlaps_start=overlaps_start,
            overlaps_end=overlaps_end,
            limit=limit,
        )
        return iterate(self._transport, pages)
