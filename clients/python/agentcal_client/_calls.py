"""Every API call, described once: the request (method, path, query, body) and how to read its answer.

The sync and async namespaces (resources.py, async_resources.py) only hand these to their transport,
so the two clients cannot drift apart in what they send.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx

from agentcal_client._transport import Call, Request, isoformat
from agentcal_client.models import (
    Approval,
    AuditRecord,
    Availability,
    Booking,
    Calendar,
    FoundHold,
    Hold,
    Identity,
    Inbox,
    MeetingTimes,
    Message,
    Model,
    Page,
    QueuedMessage,
    Thread,
    ThreadDetail,
)

M = TypeVar("M", bound=Model)

# A function from a page's cursor (None for the first) to the call that fetches that page.
PageCalls = Callable[[str | None], Call[Page[M]]]


def _one(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.from_json(response.json())


def _page(model: type[M]) -> Callable[[httpx.Response], Page[M]]:
    return lambda response: Page.parse(model, response.json())


def _bytes(response: httpx.Response) -> bytes:
    return response.content


def _query(**values: Any) -> dict[str, str]:
    """Query parameters without the unset ones; times as RFC 3339, booleans as the API spells them."""
    query: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            query[name] = isoformat(value)
        elif isinstance(value, bool):
            query[name] = "true" if value else "false"
        else:
            query[name] = str(value)
    return query


def _body(**values: Any) -> dict[str, Any]:
    """A JSON body without the unset fields (the server applies its defaults to those)."""
    body: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        body[name] = isoformat(value) if isinstance(value, datetime) else value
    return body


def _if_match(version: int | None) -> dict[str, str]:
    return {"If-Match": f'"{version}"'} if version is not None else {}


def _pages(path: str, model: type[M], **filters: Any) -> PageCalls[M]:
    def call(cursor: str | None) -> Call[Page[M]]:
        return Call(Request("GET", path, params=_query(cursor=cursor, **filters)), _page(model))

    return call


# --- Calendars ---------------------------------------------------------------------------------------------


def calendars_list(*, limit: int | None) -> PageCalls[Calendar]:
    return _pages("/calendars", Calendar, limit=limit)


def calendar_get(calendar_id: str) -> Call[Calendar]:
    return Call(Request("GET", f"/calendars/{calendar_id}"), _one(Calendar))


def calendar_create(**fields: Any) -> Call[Calendar]:
    return Call(Request("POST", "/calendars", json=_body(**fields)), _one(Calendar))


def calendar_update(calendar_id: str, *, clear_working_hours: bool = False, **fields: Any) -> Call[Calendar]:
    body = _body(**fields)
    if clear_working_hours:
        if "working_hours" in body:
            raise ValueError("calendars.update: pass working_hours or clear_working_hours, not both")
        body["working_hours"] = None  # null: open at any time
    if not body:
        raise ValueError("calendars.update: pass at least one field to change")
    return Call(Request("PATCH", f"/calendars/{calendar_id}", json=body), _one(Calendar))


def availability(
    calendar_id: str, start: datetime, end: datetime, *, duration: timedelta | None
) -> Call[Availability]:
    minutes = None if duration is None else _whole_minutes(duration)
    params = _query(start=start, end=end, duration_minutes=minutes)
    return Call(Request("GET", f"/calendars/{calendar_id}/availability", params=params), _one(Availability))


def _whole_minutes(duration: timedelta) -> int:
    minutes = int(duration.total_seconds() // 60)
    if minutes < 1 or duration.total_seconds() % 60:
        raise ValueError("duration must be a whole number of minutes, at least one")
    return minutes


@dataclass(frozen=True, kw_only=True)
class MeetingSearch:
    """What find_meeting_time and hold_meeting look for: a time of `duration` in [start, end) free on
    every calendar of `calendars`, inside their working hours, and which of `optional_calendars` are free."""

    calendars: Sequence[str]
    duration: timedelta
    start: datetime
    end: datetime
    optional_calendars: Sequence[str] | None = None
    min_optional: int | None = None
    granularity_minutes: int | None = None
    limit: int | None = None
    order: str | None = None

    def to_json(self) -> dict[str, Any]:
        for name, ids in (("calendars", self.calendars), ("optional_calendars", self.optional_calendars)):
            if isinstance(ids, str):
                raise TypeError(f"`{name}` is a list of calendar ids, not one string")
        return _body(
            calendars=list(self.calendars),
            optional_calendars=None if self.optional_calendars is None else list(self.optional_calendars),
            min_optional=self.min_optional,
            duration_minutes=_whole_minutes(self.duration),
            start=self.start,
            end=self.end,
            granularity_minutes=self.granularity_minutes,
            limit=self.limit,
            order=self.order,
        )


def find_meeting_time(search: MeetingSearch) -> Call[MeetingTimes]:
    return Call(Request("POST", "/availability/search", json=search.to_json()), _one(MeetingTimes))


# --- Holds -------------------------------------------------------------------------------------------------


def hold_create(
    calendar_id: str,
    start: datetime,
    end: datetime,
    *,
    ttl_seconds: int | None,
    priority: int | None,
    title: str | None,
    attendees: list[Any] | None,
    metadata: dict[str, Any] | None,
    also_calendars: Sequence[str] | None,
    if_version: int | None,
) -> Call[Hold]:
    body = _body(
        start_time=start,
        end_time=end,
        ttl_seconds=ttl_seconds,
        priority=priority,
        title=title,
        attendees=attendees,
        metadata=metadata,
        also_calendars=list(also_calendars) if also_calendars is not None else None,
    )
    request = Request("POST", f"/calendars/{calendar_id}/holds", json=body, headers=_if_match(if_version))
    return Call(request, _one(Hold))


def hold_meeting(
    search: MeetingSearch,
    *,
    ttl_seconds: int | None,
    priority: int | None,
    title: str | None,
    attendees: list[Any] | None,
    metadata: dict[str, Any] | None,
) -> Call[FoundHold]:
    body = _body(
        search=search.to_json(),
        ttl_seconds=ttl_seconds,
        priority=priority,
        title=title,
        attendees=attendees,
        metadata=metadata,
    )
    return Call(Request("POST", "/holds", json=body), _one(FoundHold))


def hold_get(hold_id: str) -> Call[Hold]:
    return Call(Request("GET", f"/holds/{hold_id}"), _one(Hold))


def hold_extend(hold_id: str, hold_token: str, *, ttl_seconds: int | None) -> Call[Hold]:
    body = _body(hold_token=hold_token, ttl_seconds=ttl_seconds)
    return Call(Request("POST", f"/holds/{hold_id}/extend", json=body), _one(Hold))


def hold_release(hold_id: str, hold_token: str) -> Call[Hold]:
    # The token in the body, as the schema has it: a secret in a URL ends up in access logs.
    return Call(Request("DELETE", f"/holds/{hold_id}", json={"hold_token": hold_token}), _one(Hold))


def hold_commit(hold: Hold, *, fencing_token: int | None) -> Call[Booking]:
    if hold.hold_token is None:
        raise ValueError(
            f"hold {hold.id} has no hold_token: commit the Hold returned by holds.create "
            "(only its creation reveals the token)"
        )
    body = _body(
        hold_token=hold.hold_token,
        fencing_token=hold.fencing_token if fencing_token is None else fencing_token,
    )
    return Call(Request("POST", f"/calendars/{hold.calendar}/commits", json=body), _one(Booking))


# --- Bookings ----------------------------------------------------------------------------------------------


def booking_commit(
    calendar_id: str,
    start: datetime,
    end: datetime,
    *,
    priority: int | None,
    title: str | None,
    attendees: list[Any] | None,
    metadata: dict[str, Any] | None,
    also_calendars: Sequence[str] | None,
    if_version: int | None,
) -> Call[Booking]:
    body = _body(
        start_time=start,
        end_time=end,
        priority=priority,
        title=title,
        attendees=attendees,
        metadata=metadata,
        also_calendars=list(also_calendars) if also_calendars is not None else None,
    )
    request = Request("POST", f"/calendars/{calendar_id}/commits", json=body, headers=_if_match(if_version))
    return Call(request, _one(Booking))


def booking_get(booking_id: str) -> Call[Booking]:
    return Call(Request("GET", f"/bookings/{booking_id}"), _one(Booking))


def bookings_list(
    calendar_id: str,
    *,
    start: datetime | None,
    end: datetime | None,
    status: str | None,
    limit: int | None,
) -> PageCalls[Booking]:
    return _pages(
        f"/calendars/{calendar_id}/bookings", Booking, start=start, end=end, status=status, limit=limit
    )


def booking_cancel(booking_id: str) -> Call[Booking]:
    return Call(Request("DELETE", f"/bookings/{booking_id}"), _one(Booking))


def booking_move(
    booking_id: str, start: datetime, end: datetime, *, fencing_token: int | None, if_match: int | None
) -> Call[Booking]:
    body = _body(start_time=start, end_time=end, fencing_token=fencing_token)
    request = Request("POST", f"/bookings/{booking_id}/move", json=body, headers=_if_match(if_match))
    return Call(request, _one(Booking))


def booking_move_to_found_time(
    booking_id: str, search: MeetingSearch, *, fencing_token: int | None
) -> Call[Booking]:
    body = _body(search=search.to_json(), fencing_token=fencing_token)
    return Call(Request("POST", f"/bookings/{booking_id}/move", json=body), _one(Booking))


def earliest_time_for(booking: Booking, start: datetime, end: datetime) -> MeetingSearch:
    """The search that moves `booking` to the earliest time in [start, end) on its own calendars, for as
    long as it lasts now."""
    return MeetingSearch(
        calendars=[booking.calendar, *booking.also_calendars],
        duration=booking.end_time - booking.start_time,
        start=start,
        end=end,
    )


# --- Approvals ---------------------------------------------------------------------------------------------


def approval_request(
    summary: str,
    evidence: dict[str, Any],
    *,
    hold_id: str | None,
    state: Any,
    expires_in_seconds: int | None,
) -> Call[Approval]:
    body = _body(summary=summary, evidence=evidence, hold_id=hold_id, expires_in_seconds=expires_in_seconds)
    if state is not None:
        body["state"] = state
    return Call(Request("POST", "/approvals", json=body), _one(Approval))


def approval_get(approval_id: str) -> Call[Approval]:
    return Call(Request("GET", f"/approvals/{approval_id}"), _one(Approval))


def approvals_list(*, status: str | None, limit: int | None) -> PageCalls[Approval]:
    return _pages("/approvals", Approval, status=status, limit=limit)


def approval_cancel(approval_id: str) -> Call[Approval]:
    return Call(Request("POST", f"/approvals/{approval_id}/cancel"), _one(Approval))


# --- Inbox -------------------------------------------------------------------------------------------------


def me() -> Call[Identity]:
    return Call(Request("GET", "/me"), _one(Identity))


def inbox_get() -> Call[Inbox]:
    return Call(Request("GET", "/inbox"), _one(Inbox))


def inbox_threads(*, limit: int | None) -> PageCalls[Thread]:
    return _pages("/inbox/threads", Thread, limit=limit)


def inbox_thread(thread_id: str) -> Call[ThreadDetail]:
    return Call(Request("GET", f"/inbox/threads/{thread_id}"), _one(ThreadDetail))


def inbox_messages(*, thread: str | None, since: datetime | None, limit: int | None) -> PageCalls[Message]:
    return _pages("/inbox/messages", Message, thread=thread, since=since, limit=limit)


def inbox_message(message_id: str) -> Call[Message]:
    return Call(Request("GET", f"/inbox/messages/{message_id}"), _one(Message))


def inbox_raw(message_id: str) -> Call[bytes]:
    return Call(Request("GET", f"/inbox/messages/{message_id}/raw"), _bytes)


def inbox_attachment(message_id: str, attachment_id: str) -> Call[bytes]:
    return Call(Request("GET", f"/inbox/messages/{message_id}/attachments/{attachment_id}"), _bytes)


def inbox_reply(message_id: str, text: str, *, html: str | None, reply_all: bool) -> Call[QueuedMessage]:
    body = _body(text=text, html=html, reply_all=reply_all)
    return Call(Request("POST", f"/inbox/messages/{message_id}/reply", json=body), _one(QueuedMessage))


def inbox_send(
    to: Sequence[str],
    subject: str,
    text: str,
    *,
    cc: Sequence[str] | None,
    html: str | None,
    invite_booking_id: str | None,
) -> Call[QueuedMessage]:
    if isinstance(to, str):
        raise TypeError("inbox.send: `to` is a list of addresses, not one string")
    body = _body(
        to=list(to),
        subject=subject,
        text=text,
        cc=list(cc) if cc is not None else None,
        html=html,
        invite={"booking_id": invite_booking_id} if invite_booking_id is not None else None,
    )
    return Call(Request("POST", "/inbox/send", json=body), _one(QueuedMessage))


# --- Audit -------------------------------------------------------------------------------------------------


def audit_list(
    *,
    event_type: str | None,
    agent: str | None,
    calendar: str | None,
    outcome: str | None,
    since: datetime | None,
    until: datetime | None,
    overlaps_start: datetime | None,
    overlaps_end: datetime | None,
    limit: int | None,
) -> PageCalls[AuditRecord]:
    return _pages(
        "/audit",
        AuditRecord,
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
