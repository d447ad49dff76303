"""The audit browser: filters in the query string, keyset pages, read-time retention, expansion."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import signing

from audit.events import AuditEvent
from audit.models import AuditRecord, Outcome
from audit.services import audit_record
from dashboard.views import audit as audit_views
from tests.dashboard.pages_helpers import (
    actor,
    insert_audit_row,
    make_calendar,
    signed_in,
    text,
)
from workspaces.models import Agent

AUDIT = "/w/acme/audit"


def row_ids(html: str) -> list[str]:
    return re.findall(r'data-testid="audit-row" data-record="(aud_[a-z0-9]+)"', html)


def older_link(html: str) -> str:
    match = re.search(r'data-testid="older" href="([^"]+)"', html)
    assert match, "no Older link"
    return unescape(match.group(1))


def test_a_member_sees_the_trail_newest_first_with_agent_names(team):
    cal = make_calendar(team.workspace, "Sales team")
    first = audit_record(
        event_type=AuditEvent.CALENDAR_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor(team.sdr),
        calendar_public_id=cal.public_id,
    )
    second = audit_record(
        event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.exec_assistant)
    )

    response = signed_in(team.member).get(AUDIT)

    assert response.status_code == 200
    html = text(response)
    assert row_ids(html) == [second.public_id, first.public_id]
    assert "Agent SDR bot created the calendar Sales team" in html
    assert "Agent Exec assistant held a slot" in html and "Hold placed" in html


def test_rejected_rows_are_marked_with_their_reason(team):
    rejected = audit_record(
        event_type=AuditEvent.HOLD_REJECTED,
        outcome=Outcome.REJECTED,
        actor=actor(team.sdr),
        http_status=409,
        failure_reason="slot_conflict",
    )
    html = text(signed_in(team.member).get(AUDIT))
    assert re.search(rf'class="audit-row rejected"[^>]*data-record="{rejected.public_id}"', html)
    assert "Agent SDR bot was refused a hold: slot taken (409)" in html
    assert '<span class="pill rejected">Rejected</span>' in html


def test_the_htmx_partial_is_just_the_results(team):
    audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    response = signed_in(team.member).get(AUDIT, {"outcome": "success"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    partial = text(response)
    assert 'id="audit-results"' in partial and "Hold placed" in partial
    assert "<html" not in partial and "sidebar" not in partial and "audit-filters" not in partial


def test_a_row_expands_to_its_full_record_escaped(team):
    record = audit_record(
        event_type=AuditEvent.HOLD_REJECTED,
        outcome=Outcome.REJECTED,
        actor=actor(team.sdr),
        failure_reason="slot_conflict",
        conflict_details={"note": "<script>alert(1)</script>"},
    )
    client = signed_in(team.member)
    html = text(client.get(AUDIT))
    assert f'hx-get="/w/acme/audit?record={record.public_id}"' in html

    partial = client.get(AUDIT, {"record": record.public_id}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    body = text(partial)
    assert "<html" not in body and 'data-testid="record-detail"' in body
    assert '<span class="j-key">&quot;failure_reason&quot;</span>' in body
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert team.sdr.public_id in body and team.workspace.public_id in body  # the API's representation

    page = client.get(AUDIT, {"record": record.public_id})
    assert page.status_code == 200 and "<html" in text(page) and "Permalink" in text(page)


def test_filters_by_event_family_agent_calendar_and_outcome(team):
    cal = make_calendar(team.workspace)
    hold = audit_record(
        event_type=AuditEvent.HOLD_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor(team.sdr),
        calendar_public_id=cal.public_id,
    )
    extend = audit_record(event_type=AuditEvent.HOLD_EXTENDED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    commit = audit_record(
        event_type=AuditEvent.COMMIT_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor(team.exec_assistant),
        calendar_public_id=cal.public_id,
    )
    rejected = audit_record(
        event_type=AuditEvent.HOLD_REJECTED,
        outcome=Outcome.REJECTED,
        actor=actor(team.exec_assistant),
    )
    client = signed_in(team.member)

    def ids(**query: str) -> set[str]:
        response = client.get(AUDIT, query)
        assert response.status_code == 200
        return set(row_ids(text(response)))

    assert ids(event_type="calendar.hold.*") == {hold.public_id, extend.public_id, rejected.public_id}
    assert ids(event_type="calendar.commit.created") == {commit.public_id}
    assert ids(agent=team.sdr.public_id) == {hold.public_id, extend.public_id}
    assert ids(calendar=cal.public_id) == {hold.public_id, commit.public_id}
    assert ids(outcome="rejected") == {rejected.public_id}
    assert ids(event_type="calendar.hold.*", agent=team.exec_assistant.public_id) == {rejected.public_id}
    # The form shows the filters it applied, so the URL is the whole state.
    html = text(client.get(AUDIT, {"event_type": "calendar.hold.*", "outcome": "rejected"}))
    assert '<option value="calendar.hold.*" selected>' in html
    assert '<option value="rejected" selected>' in html


def test_the_time_range_is_read_as_utc(team):
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    ws = team.workspace.pk
    old = insert_audit_row(workspace_id=ws, at=now - timedelta(hours=3))
    middle = insert_audit_row(workspace_id=ws, at=now - timedelta(hours=2))
    recent = insert_audit_row(workspace_id=ws, at=now - timedelta(hours=1))
    fmt = "%Y-%m-%dT%H:%M"
    since = (now - timedelta(hours=2, minutes=30)).strftime(fmt)
    until = (now - timedelta(hours=1, minutes=30)).strftime(fmt)
    client = signed_in(team.member)

    assert row_ids(text(client.get(AUDIT, {"since": since, "until": until}))) == [middle]
    assert row_ids(text(client.get(AUDIT, {"since": since}))) == [recent, middle]
    assert row_ids(text(client.get(AUDIT, {"until": until}))) == [middle, old]


def test_a_malformed_filter_is_reported_and_ignored(team):
    audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    response = signed_in(team.member).get(AUDIT, {"since": "yesterday", "outcome": "maybe"})
    assert response.status_code == 200
    html = text(response)
    assert 'data-testid="filter-errors"' in html and "Use YYYY-MM-DDTHH:MM (UTC)." in html
    assert len(row_ids(html)) == 1


def test_a_range_that_ends_before_it_starts_is_reported_and_its_end_ignored(team):
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    earlier = insert_audit_row(workspace_id=team.workspace.pk, at=now - timedelta(hours=2))
    later = insert_audit_row(workspace_id=team.workspace.pk, at=now - timedelta(hours=1))
    fmt = "%Y-%m-%dT%H:%M"
    since, until = (now - timedelta(hours=3)).strftime(fmt), (now - timedelta(hours=4)).strftime(fmt)

    html = text(signed_in(team.member).get(AUDIT, {"since": since, "until": until}))

    assert 'data-testid="filter-errors"' in html and "Pick a time after From." in html
    assert row_ids(html) == [later, earlier]


def test_older_pages_follow_a_signed_cursor_that_keeps_the_filters(team):
    now = datetime.now(UTC)
    inserted = [
        insert_audit_row(workspace_id=team.workspace.pk, at=now - timedelta(minutes=60 - n))
        for n in range(60)
    ]
    ids = inserted[::-1]  # newest first, as the page lists them
    insert_audit_row(workspace_id=team.workspace.pk, at=now, event_type="calendar.commit.created")
    client = signed_in(team.member)

    first = text(client.get(AUDIT, {"event_type": "calendar.hold.*"}))
    assert row_ids(first) == ids[:50]
    link = older_link(first)
    assert "event_type=calendar.hold.%2A" in link
    cursor = parse_qs(urlsplit(link).query)["cursor"][0]
    # The cursor names a row by its public id, signed; internal integer ids never appear.
    position = signing.loads(cursor, salt="agentcal.api.cursor")
    assert position["after"] == ids[49]

    second = client.get(link)
    assert second.status_code == 200
    html = text(second)
    assert row_ids(html) == ids[50:]
    assert 'data-testid="older"' not in html and "← Newest" in html
    # The htmx version of the same link gives the same rows as a partial.
    assert row_ids(text(client.get(link, HTTP_HX_REQUEST="true"))) == ids[50:]


def test_a_tampered_cursor_starts_again_from_the_newest(team):
    newest = audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    response = signed_in(team.member).get(AUDIT, {"cursor": "not-a-cursor"})
    assert response.status_code == 200
    assert "no longer valid" in text(response) and row_ids(text(response)) == [newest.public_id]


def test_rows_past_the_retention_window_are_never_shown(team):
    team.workspace.audit_retention_days = 30
    team.workspace.save(update_fields=["audit_retention_days"])
    now = datetime.now(UTC)
    kept = insert_audit_row(workspace_id=team.workspace.pk, at=now - timedelta(days=29))
    expired = insert_audit_row(workspace_id=team.workspace.pk, at=now - timedelta(days=31))
    client = signed_in(team.member)

    html = text(client.get(AUDIT, {"since": (now - timedelta(days=400)).strftime("%Y-%m-%dT%H:%M")}))
    assert row_ids(html) == [kept]
    assert client.get(AUDIT, {"record": expired}).status_code == 404
    assert client.get(AUDIT, {"record": expired}, HTTP_HX_REQUEST="true").status_code == 404


def test_empty_states_distinguish_no_activity_from_no_match(team):
    client = signed_in(team.member)
    assert "No activity yet" in text(client.get(AUDIT))
    audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    html = text(client.get(AUDIT, {"outcome": "rejected"}))
    assert "No events match these filters" in html and row_ids(html) == []


def test_another_workspaces_rows_never_show(team):
    theirs = audit_record(
        event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.rival)
    )
    client = signed_in(team.member)
    assert theirs.public_id not in text(client.get(AUDIT))
    assert client.get(AUDIT, {"record": theirs.public_id}).status_code == 404


def test_anonymous_is_sent_to_sign_in_and_outsiders_get_404(team, client):
    ours = audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    response = client.get(AUDIT)
    assert response.status_code == 302 and response["Location"].startswith("/auth/sign-in")
    outsider = signed_in(team.outsider)
    assert outsider.get(AUDIT).status_code == 404
    assert outsider.get(AUDIT, HTTP_HX_REQUEST="true").status_code == 404
    assert outsider.get(AUDIT, {"record": ours.public_id}, HTTP_HX_REQUEST="true").status_code == 404


def test_admin_actions_appear_with_the_persons_email(team):
    owner = signed_in(team.owner)
    owner.post("/w/acme/agents", {"name": "Night shift", "priority": "100"})

    html = text(signed_in(team.member).get(AUDIT, {"event_type": "agent.*"}))

    assert len(row_ids(html)) == 1
    assert "agent.created" in html and "olivia@acme.test" in html and "Night shift" in html


@pytest.mark.parametrize("query", ["event_type=a%00b", "agent=%00", "cursor=%00", "x%00=1"])
def test_a_query_postgresql_cannot_take_is_400_not_500(team, query):
    response = signed_in(team.member).get(f"{AUDIT}?{query}")
    assert response.status_code == 400


# --- A table, sortable by time ------------------------------------------------------------------------------


def test_the_trail_is_a_table_with_a_caption_and_column_headers(team):
    audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    html = text(signed_in(team.member).get(AUDIT))
    assert '<table class="table audit-table">' in html and "<caption" in html
    headers = re.findall(r'<th scope="col"[^>]*>(.*?)</th>', html, re.S)
    assert (
        len(headers) == 4
        and "Time" in headers[0]
        and "(UTC)" not in headers[0]
        and "What happened" in headers[1]
    )
    assert 'aria-sort="descending"' in html and 'aria-hidden="true"><span' not in html
    # Each row's Details button controls the row below it, which htmx fills with the full record.
    (record_id,) = row_ids(html)
    assert (
        f'aria-controls="record-{record_id}"' in html
        and f'<tr class="record-row" id="record-{record_id}" hidden>' in html
    )


def sort_link_in(html: str) -> str:
    found = re.search(r'href="([^"]+)" data-testid="sort-time"', html)
    assert found, "no sort link"
    return unescape(found.group(1))


def test_sorting_oldest_first_flips_the_order_and_its_pages_follow(team):
    now = datetime.now(UTC)
    inserted = [
        insert_audit_row(workspace_id=team.workspace.pk, at=now - timedelta(minutes=60 - n))
        for n in range(55)
    ]
    client = signed_in(team.member)
    newest_first = text(client.get(AUDIT))
    sort_link = sort_link_in(newest_first)
    assert sort_link == f"{AUDIT}?sort=oldest"

    oldest_first = text(client.get(sort_link))
    assert row_ids(oldest_first) == inserted[:50] and 'aria-sort="ascending"' in oldest_first
    assert '<input type="hidden" name="sort" value="oldest">' in oldest_first  # the filters keep it
    link = older_link(oldest_first)
    assert "sort=oldest" in link and row_ids(text(client.get(link))) == inserted[50:]
    back = sort_link_in(oldest_first)
    assert back == AUDIT


# --- CSV ------------------------------------------------------------------------------------------------


def csv_rows(response) -> list[dict[str, str]]:
    assert response.status_code == 200 and response.streaming
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


def test_the_csv_link_carries_the_filters_and_the_csv_the_selection(team, monkeypatch):
    monkeypatch.setattr(audit_views, "CSV_BATCH", 2)  # several batches from a handful of rows
    now = datetime.now(UTC)
    ws = team.workspace.pk
    cal = make_calendar(team.workspace, "Sales team")
    rejected = [
        insert_audit_row(
            workspace_id=ws,
            at=now - timedelta(minutes=10 - n),
            event_type="calendar.hold.rejected",
            outcome="rejected",
            agent_public_id=team.sdr.public_id,
            calendar_public_id=cal.public_id,
            failure_reason="slot_conflict",
        )
        for n in range(5)
    ]
    insert_audit_row(workspace_id=ws, at=now, event_type="calendar.hold.created")  # filtered out
    insert_audit_row(workspace_id=ws, at=now - timedelta(days=400), outcome="rejected")  # past retention
    insert_audit_row(workspace_id=team.other_workspace.pk, at=now, outcome="rejected")  # another workspace
    client = signed_in(team.member)

    page = text(client.get(AUDIT, {"outcome": "rejected", "sort": "oldest"}))
    found = re.search(r'href="([^"]+)" download data-testid="audit-csv"', page)
    assert found
    link = unescape(found.group(1))
    assert link == f"{AUDIT}.csv?outcome=rejected&sort=oldest"

    response = client.get(link)

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(
        r'attachment; filename="audit-acme-\d{8}T\d{6}Z\.csv"', response["Content-Disposition"]
    )
    rows = csv_rows(response)
    assert [row["id"] for row in rows] == rejected  # oldest first, every batch, nothing else
    assert rows[0]["agent_name"] == "SDR bot" and rows[0]["calendar_name"] == "Sales team"
    assert rows[0]["failure_reason"] == "slot_conflict" and rows[0]["timestamp"].endswith("Z")
    assert [row["id"] for row in csv_rows(client.get(f"{AUDIT}.csv", {"outcome": "rejected"}))] == rejected[
        ::-1
    ]


def test_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_defused(team):
    evil = Agent.objects.create(workspace=team.workspace, name='=HYPERLINK("http://x.test")', slug="evil")
    record = audit_record(
        event_type=AuditEvent.HOLD_REJECTED,
        outcome=Outcome.REJECTED,
        actor=actor(evil),
        failure_reason="@SUM(A1)",
        request_id="+1-555",
        details={"title": "-2+3"},
    )
    (row,) = csv_rows(signed_in(team.member).get(f"{AUDIT}.csv"))
    assert row["id"] == record.public_id
    assert row["agent_name"] == '\'=HYPERLINK("http://x.test")'
    assert row["failure_reason"] == "'@SUM(A1)" and row["request_id"] == "'+1-555"
    assert row["details"] == '{"title": "-2+3"}'  # JSON starts with a brace: nothing to defuse
    assert audit_views.csv_cell("-5") == "'-5" and audit_views.csv_cell("\tx") == "'\tx"
    assert audit_views.csv_cell("plain") == "plain" and audit_views.csv_cell(None) == ""


def test_the_csv_follows_the_pages_rules(team, client):
    record = audit_record(event_type=AuditEvent.HOLD_CREATED, outcome=Outcome.SUCCESS, actor=actor(team.sdr))
    assert client.get(f"{AUDIT}.csv")["Location"].startswith("/auth/sign-in")
    assert signed_in(team.outsider).get(f"{AUDIT}.csv").status_code == 404
    rows = csv_rows(
        signed_in(team.member).get(f"{AUDIT}.csv", {"since": "yesterday"})
    )  # ignored, as on the page
    assert [row["id"] for row in rows] == [record.public_id]
    assert list(rows[0]) == audit_views.CSV_COLUMNS


def test_a_row_about_an_approval_links_to_it(team):
    from approvals.services import approval_request

    approval = approval_request(actor=actor(team.sdr), summary="Send the quote to Globex", evidence={})
    asked = AuditRecord.objects.get(event_type=AuditEvent.APPROVAL_REQUESTED)
    odd = audit_record(
        event_type=AuditEvent.APPROVAL_CANCELLED,
        outcome=Outcome.SUCCESS,
        actor=actor(team.sdr),
        details={"approval_id": "appr_../../admin"},
    )

    html = text(signed_in(team.member).get(AUDIT))

    def row(record: AuditRecord) -> str:
        start = html.index(f'data-record="{record.public_id}"')
        return html[start : html.index("</tr>", start)]

    assert f'href="/w/acme/approvals/{approval.public_id}" data-testid="audit-approval-link"' in row(asked)
    assert "audit-approval-link" not in row(odd)


def test_agents_sharing_a_name_are_told_apart_in_the_filter(team):
    twin = Agent.objects.create(workspace=team.workspace, name="SDR bot", slug="sdr-two")

    html = text(signed_in(team.member).get(AUDIT))

    options = dict(re.findall(r'<option value="(agt_[a-z0-9]+)">([^<]+)</option>', html))
    assert options[team.sdr.public_id] == f"SDR bot ({team.sdr.public_id})"
    assert options[twin.public_id] == f"SDR bot ({twin.public_id})"
    assert options[team.exec_assistant.public_id] == "Exec assistant"  # a name of its own stays bare
