"""The audit browser: the workspace's trail, filtered from the query string, newest first.

It mirrors GET /v1/audit (same filters, same read-time retention, same signed public-id cursor),
so a page's URL is a shareable, bookmarkable query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import QuerySet
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse

from agentcal.errors import InvalidRequest
from agentcal.pagination import paginate
from audit.api import AuditRecordOutput
from audit.events import AuditEvent
from audit.models import AuditRecord, Outcome
from audit.selectors import audit_records
from bookings.models import Calendar
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from workspaces.models import Agent, Workspace

PAGE_SIZE = 50
# datetime-local inputs send minutes (seconds when the browser shows them); both read as UTC.
_DATETIME_LOCAL_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")
FILTER_NAMES = ("event_type", "agent", "calendar", "outcome", "since", "until")


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


def event_families() -> list[str]:
    """Every proper prefix family of the known events: `calendar.*`, `calendar.hold.*`, ..."""
    families: set[str] = set()
    for value in AuditEvent.values:
        parts = value.split(".")
        families.update(".".join(parts[:n]) + ".*" for n in range(1, len(parts)))
    return sorted(families)


def _query_string(values: dict[str, str], **extra: str) -> str:
    query = QueryDict(mutable=True)
    query.update({**values, **extra})
    return query.urlencode()


@workspace_page()
def browser(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """The filtered trail. htmx requests get the results partial, or one record's full view."""
    if record_id := request.GET.get("record"):
        return _record(request, workspace, record_id)
    filters = parse_filters(request.GET)
    cursor = request.GET.get("cursor") or None
    scope = f"dashboard-audit:{sorted(filters.values.items())}"
    records = filtered_records(workspace, filters)
    cursor_error = ""
    try:
        page, next_cursor = paginate(
            records, cursor=cursor, limit=PAGE_SIZE, descending=True, scope=scope, key_field="public_id"
        )
    except InvalidRequest:
        # A stale or edited link: start again from the newest rows rather than fail.
        cursor, cursor_error = None, "That page link is no longer valid; showing the newest events."
        page, next_cursor = paginate(
            records, cursor=None, limit=PAGE_SIZE, descending=True, scope=scope, key_field="public_id"
        )
    agents = {a.public_id: a.name for a in Agent.objects.filter(workspace=workspace).order_by("name")}
    calendars = {c.public_id: c.name for c in Calendar.objects.filter(workspace=workspace).order_by("name")}
    rows = [
        {
            "record": record,
            "agent_name": agents.get(record.agent_public_id, ""),
            "calendar_name": calendars.get(record.calendar_public_id, ""),
            "subject": _subject(record, agents),
        }
        for record in page
    ]
    context = page_context(
        request,
        "audit",
        rows=rows,
        filters=filters,
        families=event_families(),
        event_types=sorted(AuditEvent.values),
        outcomes=Outcome.values,
        agents=agents,
        calendars=calendars,
        is_first_page=cursor is None,
        cursor_error=cursor_error,
        older_query=_query_string(filters.values, cursor=next_cursor) if next_cursor else "",
        newest_query=_query_string(filters.values),
        retention_days=workspace.audit_retention_days,
        audit_url=reverse("dashboard:audit", args=[workspace.slug]),
    )
    template = "dashboard/audit/browser.html"
    if request.htmx:
        template += "#audit-results"
    return render(request, template, context)


def _subject(record: AuditRecord, agents: dict[str, str]) -> str:
    """A short "what it was about" for admin rows, whose agent is in details (see workspaces.services)."""
    details = record.details if isinstance(record.details, dict) else {}
    agent_id = details.get("agent_id")
    if not isinstance(agent_id, str):
        return ""
    name = agents.get(agent_id, agent_id)
    prefix = details.get("key_prefix")
    return f"{name} · key {prefix}" if isinstance(prefix, str) else name


def _record(request: DashboardRequest, workspace: Workspace, record_id: str) -> HttpResponse:
    record = filtered_records(workspace, AuditFilters()).filter(public_id=record_id).first()
    if record is None:
        raise Http404("No such audit record")
    # The same representation GET /v1/audit returns, so what people and agents see cannot drift.
    full = dict(AuditRecordOutput(record, context={"workspace_public_id": workspace.public_id}).data)
    context = page_context(request, "audit", record=record, full_record=full)
    template = "dashboard/audit/record.html"
    if request.htmx:
        template += "#record-detail"
    return render(request, template, context)
