"""The audit browser: the workspace's trail, filtered from the query string, newest (or oldest) first,
and the same selection as a CSV download.

It mirrors GET /v1/audit (same filters, same read-time retention, same signed public-id cursor),
so a page's URL is a shareable, bookmarkable query. Rows are in the order they were recorded (their
timestamps come from the database's clock as each is written), which is time order.

The CSV is streamed in keyset batches, whatever the trail's size, to anyone who may read the page. Its
cells are opened by spreadsheets, which run a cell starting with = + - @ as a formula: such values
(agent-written titles, failure details) get a leading apostrophe, the usual defence.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from django.db.models import QuerySet
from django.http import Http404, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse

from agentcal.clock import isoformat_z, server_now
from agentcal.errors import InvalidRequest
from agentcal.pagination import paginate
from audit.api import AuditRecordOutput
from audit.models import AuditRecord, Outcome
from audit.selectors import audit_batch, audit_record_in, audit_records
from bookings.selectors import calendar_names
from dashboard.access import View, page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.viewmodels.audit_rows import (
    audit_rows,
    event_groups,
    known_filter_values,
    record_facts,
    workspace_calendars,
)
from dashboard.wording import event_name, failure_words
from workspaces.models import Workspace
from workspaces.selectors import agent_names_by_name

PAGE_SIZE = 50
# datetime-local inputs send minutes (seconds when the browser shows them); both read as UTC.
_DATETIME_LOCAL_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")
FILTER_NAMES = ("event_type", "agent", "calendar", "outcome", "since", "until")
OLDEST_FIRST = "oldest"  # ?sort=oldest; newest first otherwise
CSV_BATCH = 1000
# A spreadsheet reads a cell starting with one of these as a formula (tab and CR too, as OWASP lists).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_COLUMNS = [
    "id",
    "timestamp",
    "event_type",
    "outcome",
    "agent_id",
    "agent_name",
    "actor_user",
    "auth_key_prefix",
    "calendar_id",
    "calendar_name",
    "reservation_id",
    "requested_start",
    "requested_end",
    "http_status",
    "failure_reason",
    "fencing_token",
    "request_id",
    "details",
    "conflict_details",
]


@dataclass
class AuditFilters:
    values: dict[str, str] = field(default_factory=dict)  # as typed, to refill the form
    errors: dict[str, str] = field(default_factory=dict)
    since: datetime | None = None
    until: datetime | None = None

    @property
    def active(self) -> bool:
        return bool(self.values)


def _parse_utc(raw: str) -> datetime | None:
    for fmt in _DATETIME_LOCAL_FORMATS:
        try:
            return datetime.strptime(raw, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def parse_filters(query: QueryDict) -> AuditFilters:
    filters = AuditFilters()
    for name in FILTER_NAMES:
        value = query.get(name, "").strip()[:64]
        if value:
            filters.values[name] = value
    if filters.values.get("outcome") not in (None, *Outcome.values):
        filters.errors["outcome"] = "Choose success or rejected."
    for name in ("since", "until"):
        if name in filters.values:
            moment = _parse_utc(filters.values[name])
            if moment is None:
                filters.errors[name] = "Use YYYY-MM-DDTHH:MM (UTC)."
            setattr(filters, name, moment)
    # From after Until selects nothing: say so, rather than show an empty trail as if nothing happened.
    if filters.since is not None and filters.until is not None and filters.until <= filters.since:
        filters.errors["until"] = "Pick a time after From."
        filters.until = None
    return filters


def filtered_records(workspace: Workspace, filters: AuditFilters) -> QuerySet[AuditRecord]:
    # The same query as GET /v1/audit, read-time retention included.
    values = filters.values
    return audit_records(
        workspace=workspace,
        event_type=values.get("event_type"),
        agent=values.get("agent"),
        calendar=values.get("calendar"),
        outcome=values["outcome"] if "outcome" in values and "outcome" not in filters.errors else None,
        since=filters.since,
        until=filters.until,
    )


def _query_string(values: dict[str, str], **extra: str) -> str:
    query = QueryDict(mutable=True)
    query.update({**values, **{name: value for name, value in extra.items() if value}})
    return query.urlencode()


def _sort(query: QueryDict) -> str:
    return OLDEST_FIRST if query.get("sort") == OLDEST_FIRST else ""


def _names(workspace: Workspace) -> tuple[dict[str, str], dict[str, str]]:
    return agent_names_by_name(workspace), calendar_names(workspace)


def _agent_options(agents: dict[str, str]) -> dict[str, str]:
    """The agent filter's labels: a name two agents share carries each one's id, to tell them apart."""
    uses = Counter(agents.values())
    return {
        public_id: name if uses[name] == 1 else f"{name} ({public_id})" for public_id, name in agents.items()
    }


@workspace_page()
def browser(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """The filtered trail. htmx requests get the results partial, or one record's full view."""
    if record_id := request.GET.get("record"):
        return _record(request, workspace, record_id)
    filters = parse_filters(request.GET)
    sort = _sort(request.GET)
    descending = sort != OLDEST_FIRST
    cursor = request.GET.get("cursor") or None
    scope = f"dashboard-audit:{sort}:{sorted(filters.values.items())}"
    records = filtered_records(workspace, filters)
    cursor_error = ""
    try:
        page, next_cursor = paginate(
            records, cursor=cursor, limit=PAGE_SIZE, descending=descending, scope=scope, key_field="public_id"
        )
    except InvalidRequest:
        # A stale or edited link: start again from the first page rather than fail.
        cursor, cursor_error = None, "That page link is no longer valid; showing the first page again."
        page, next_cursor = paginate(
            records, cursor=None, limit=PAGE_SIZE, descending=descending, scope=scope, key_field="public_id"
        )
    agents, calendars = _names(workspace)
    rows = audit_rows(workspace, list(page), agents, workspace_calendars(workspace))
    context = page_context(
        request,
        "audit",
        rows=rows,
        filters=filters,
        event_groups=event_groups(),
        known_event_filters=known_filter_values(),
        current_event_name=event_name(filters.values.get("event_type", "")),
        active_filter_count=len(filters.values),
        # A filter change swaps only the results: the folded filters' summary gets its count out of band.
        swap_filter_count=bool(request.htmx),
        outcomes=Outcome.values,
        agents=agents,
        agent_options=_agent_options(agents),
        calendars=calendars,
        is_first_page=cursor is None,
        cursor_error=cursor_error,
        sort=sort,
        descending=descending,
        next_query=_query_string(filters.values, sort=sort, cursor=next_cursor or "") if next_cursor else "",
        first_query=_query_string(filters.values, sort=sort),
        # The header's sort link flips the order and starts from the first page.
        resort_query=_query_string(filters.values, sort="" if sort else OLDEST_FIRST),
        csv_query=_query_string(filters.values, sort=sort),
        retention_days=workspace.audit_retention_days,
        audit_url=reverse("dashboard:audit", args=[workspace.slug]),
        csv_url=reverse("dashboard:audit_csv", args=[workspace.slug]),
    )
    template = "dashboard/audit/browser.html"
    if request.htmx:
        template += "#audit-results"
    return render(request, template, context)


def _record(request: DashboardRequest, workspace: Workspace, record_id: str) -> HttpResponse:
    record = audit_record_in(workspace, record_id)
    if record is None:
        raise Http404("No such audit record")
    # The same representation GET /v1/audit returns, so what people and agents see cannot drift.
    full = dict(AuditRecordOutput(record, context={"workspace_public_id": workspace.public_id}).data)
    agents, calendars = _names(workspace)
    (row,) = audit_rows(workspace, [record], agents, workspace_calendars(workspace))
    context = page_context(
        request,
        "audit",
        record=record,
        row=row,
        facts=record_facts(full, {**agents, **calendars}, getattr(request, "viewer_zone", None)),
        failure_words=failure_words(record.failure_reason),
        full_record=full,
    )
    template = "dashboard/audit/record.html"
    if request.htmx:
        template += "#record-detail"
    return render(request, template, context)


# --- CSV ----------------------------------------------------------------------------------------------------


def csv_cell(value: Any) -> str:
    """A value as a cell no spreadsheet runs as a formula."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return isoformat_z(value)
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class _Line:
    """csv.writer's file: hands back each line it writes, for a streaming response."""

    def write(self, line: str) -> str:
        return line


def _csv_lines(
    records: QuerySet[AuditRecord], *, descending: bool, agents: dict[str, str], calendars: dict[str, str]
) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(CSV_COLUMNS)
    after: int | None = None
    while True:
        batch = audit_batch(records, after=after, descending=descending, size=CSV_BATCH)
        for r in batch:
            yield writer.writerow(
                [
                    csv_cell(value)
                    for value in (
                        r.public_id,
                        r.timestamp,
                        r.event_type,
                        r.outcome,
                        r.agent_public_id,
                        agents.get(r.agent_public_id, ""),
                        r.actor_user,
                        r.auth_key_prefix,
                        r.calendar_public_id,
                        calendars.get(r.calendar_public_id, ""),
                        r.reservation_public_id,
                        r.requested_start,
                        r.requested_end,
                        r.http_status,
                        r.failure_reason,
                        r.fencing_token,
                        r.request_id,
                        r.details,
                        r.conflict_details,
                    )
                ]
            )
        if len(batch) < CSV_BATCH:
            return
        after = batch[-1].pk


def _export_csv(request: DashboardRequest, workspace: Workspace) -> StreamingHttpResponse:
    """The page's selection (its filters and order, every page of it) as CSV. Malformed filters are
    ignored, as on the page."""
    filters = parse_filters(request.GET)
    agents, calendars = _names(workspace)
    lines = _csv_lines(
        filtered_records(workspace, filters),
        descending=_sort(request.GET) != OLDEST_FIRST,
        agents=agents,
        calendars=calendars,
    )
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    stamp = server_now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="audit-{workspace.slug}-{stamp}.csv"'
    response["Cache-Control"] = "no-store"
    return response


# workspace_page is typed for HttpResponse views; Django serves a streaming response through it the same way.
export_csv = workspace_page()(cast(View, _export_csv))
