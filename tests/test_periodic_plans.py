"""The periodic tasks read what is due, not the history: each task's statements, run against thousands
of rows of history, are planned (with the statistics as found, then after ANALYZE) to read the big
table through an index bounded by what is due."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services import approvals_finish_interrupted
from bookings import engine, services
from bookings.models import Reservation
from inboxes.invite_cancels import invite_ever_left, invites_cancel_ended
from inboxes.invite_updates import invites_update_moved
from inboxes.models import BookingInvite, Direction, Message, MessageStatus, Thread
from inboxes.review import reviews_repair
from sync.models import Connection, ConnectionStatus
from sync.services import connections_due
from tests.bookings.helpers import half_hour
from tests.plans import copies, explained, nodes, reads_of, statistics_as_found_then_analyzed, unbounded_reads
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.django_db(transaction=True)

HISTORY = 3000


@pytest.fixture
def actor(transactional_db: None) -> Actor:
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    agent = Agent.objects.create(workspace=workspace, name="sdr", slug="sdr", priority=100, max_priority=500)
    return Actor(workspace=workspace, agent=agent)


def agent_of(actor: Actor) -> Agent:
    assert actor.agent is not None
    return actor.agent


def sent(queries: CaptureQueriesContext, start: str, *also: str) -> str:
    """The one statement sent that starts with `start` and contains each of `also`."""
    (sql,) = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(start) and all(a in q["sql"] for a in also)
    ]
    return str(sql)


def assert_bounded(sql: str, table: str, *, through: set[str], analyze: tuple[str, ...] = ()) -> None:
    """The statement reads `table` only through the indexes `through`, each bounded by an index
    condition, with the statistics as found and after ANALYZE."""
    for analyzed in statistics_as_found_then_analyzed(table, *analyze):
        plan = explained(sql)
        assert not unbounded_reads(plan, table), (analyzed, reads_of(plan, table))
        assert reads_of(plan, table) <= through, (analyzed, reads_of(plan, table))


def test_the_sync_scheduler_reads_the_due_connections_not_the_revoked_ones(actor: Actor) -> None:
    """A revoked connection never syncs again and its next_sync_at stays in the past: by next_sync_at
    alone, every scheduler tick read all of them before the first connection actually due."""
    gone = services.calendar_create(actor=actor, name="gone")
    revoked = Connection.objects.create(
        workspace=actor.workspace,
        calendar=gone,
        provider="caldav",
        secret="x",
        status=ConnectionStatus.REVOKED,
    )
    copies(type(gone), gone, HISTORY, public_id="r.public_id || '_' || i", name="r.name || i")
    copies(
        Connection,
        revoked,
        HISTORY,
        public_id="r.public_id || '_' || i",
        calendar_id=f"(SELECT id FROM bookings_calendar WHERE public_id = '{gone.public_id}_' || i)",
        next_sync_at="now() - interval '30 days' + i * interval '1 minute'",
    )
    due = Connection.objects.create(
        workspace=actor.workspace,
        calendar=services.calendar_create(actor=actor, name="room"),
        provider="caldav",
        secret="x",
        status=ConnectionStatus.ACTIVE,
    )
    with CaptureQueriesContext(connection) as queries:
        assert connections_due() == [due.pk]
    claim = sent(queries, 'SELECT "sync_connection"."id"', "FOR UPDATE SKIP LOCKED")

    assert_bounded(claim, "sync_connection", through={"connection_sync_due"})


def outbound_history(actor: Actor, **made: str) -> Thread:
    """HISTORY messages the agent sent, in one thread: what every look-up by agent would read."""
    thread = Thread.objects.create(agent=agent_of(actor), subject="s", counterpart="ana@example.com")
    sent = Message.objects.create(
        agent=agent_of(actor),
        thread=thread,
        direction=Direction.OUTBOUND,
        status=MessageStatus.SENT,
        untrusted=False,
        received_at=timezone.now(),
    )
    copies(
        Message,
        sent,
        HISTORY,
        public_id="r.public_id || '_' || i",
        received_at="now() - i * interval '1 hour'",
        **made,
    )
    return thread


def test_the_review_repair_reads_the_unlinked_drafts_and_their_approval_not_the_history(actor: Actor) -> None:
    """Every minute the repair looks for drafts held for review but never linked to their approval, and
    for each, its approval by the draft it names. By status and id, it read every message; by agent, the
    agent's every approval."""
    thread = outbound_history(actor, approval_id="'appr_h' || i")
    approval = Approval.objects.create(
        workspace=actor.workspace,
        agent=agent_of(actor),
        summary="Send it?",
        evidence={"message": "msg_h"},
        status=ApprovalStatus.APPROVED,
        expires_at=timezone.now() + timedelta(days=1),
        decided_at=timezone.now(),
        decided_by_email="owner@example.com",
    )
    copies(
        Approval,
        approval,
        HISTORY,
        public_id="r.public_id || '_' || i",
        evidence="jsonb_build_object('message', 'msg_h' || i)",
    )
    Message.objects.create(
        agent=agent_of(actor),
        thread=thread,
        direction=Direction.OUTBOUND,
        status=MessageStatus.AWAITING_APPROVAL,
        untrusted=False,
        received_at=timezone.now() - timedelta(hours=1),
    )
    with CaptureQueriesContext(connection) as queries:
        assert reviews_repair() == 1
    stale = sent(queries, 'SELECT "inboxes_message"."id"', "'awaiting_approval'", "LIMIT 100")
    linked = sent(queries, 'SELECT "approvals_approval"."id"', '"evidence" -> ')

    assert_bounded(stale, "inboxes_message", through={"message_review_unlinked"})
    assert_bounded(linked, "approvals_approval", through={"approval_agent_message"})


def test_whether_an_invite_ever_left_reads_its_messages_not_the_agents_history(actor: Actor) -> None:
    """Asked per invite by both invite sweeps: by agent, it read every message the agent ever sent."""
    outbound_history(actor, invite_booking_id="CASE WHEN i % 2 = 0 THEN 'bkg_h' || i END")
    with CaptureQueriesContext(connection) as queries:
        assert not invite_ever_left(BookingInvite(agent=agent_of(actor), booking_id="bkg_x"))
    (carriers,) = [q["sql"] for q in queries.captured_queries]

    assert_bounded(carriers, "inboxes_message", through={"message_agent_invite"})


def test_the_approvals_repair_reads_the_unsettled_decisions_not_every_decision(actor: Actor) -> None:
    """Every 30 s the repair looks for approved decisions whose hold was never committed, and for denied
    ones whose hold is still held unless a newer approval took it over. Without statistics the first read
    every approved approval of the workspace through the dashboard's queue index; the second asked the
    whole table, per decision, for a newer approval of the same hold."""
    approval = Approval.objects.create(
        workspace=actor.workspace,
        agent=agent_of(actor),
        summary="Book it?",
        evidence={},
        hold_id="hld_h",
        status=ApprovalStatus.APPROVED,
        booking_id="bkg_h",
        expires_at=timezone.now() + timedelta(days=1),
        decided_at=timezone.now(),
        decided_by_email="owner@example.com",
    )
    hold = "r.hold_id || '_' || i"
    decided = "now() - i * interval '5 minutes'"  # about a week and a half of decisions, every 5 minutes
    copies(
        Approval,
        approval,
        HISTORY,
        public_id="r.public_id || '_' || i",
        hold_id=hold,
        booking_id="r.booking_id || '_' || i",
        decided_at=decided,
    )
    copies(
        Approval,
        approval,
        HISTORY,
        public_id="r.public_id || '_d' || i",
        hold_id=hold,
        status="'denied'",
        booking_id="NULL",
        decided_at=decided,
    )
    with CaptureQueriesContext(connection) as queries:
        assert approvals_finish_interrupted() == 0
    unsettled = sent(queries, 'SELECT "approvals_approval"."id"', "'approved'")
    still_held = sent(queries, 'SELECT "approvals_approval"."id"', "NOT (EXISTS(")

    assert_bounded(unsettled, "approvals_approval", through={"approval_approved_unsettled"})
    # The denied decisions of the repair's window (seven days), and per decision the hold's approvals.
    assert_bounded(still_held, "approvals_approval", through={"approval_gated_decided", "approval_hold"})


def test_the_invite_sweeps_read_the_meetings_not_yet_over_not_every_invite_ever_sent(actor: Actor) -> None:
    """Every minute each invite sweep asks which open invites need a CANCEL or an update, and an invite
    whose booking simply took place stays open for good: by `cancelled_at IS NULL` alone, both sweeps
    read every past meeting's invite, and looked its booking up, each time."""
    calendar = services.calendar_create(actor=actor, name="room")
    head = engine.booking_create(actor=actor, calendar=calendar, span=half_hour(30)).primary
    assert head.booking_id is not None
    invite = BookingInvite.objects.create(
        booking_id=head.booking_id,
        agent=agent_of(actor),
        uid=f"{head.booking_id}@acme",
        start_time=head.start_time,
        end_time=head.end_time,
        summary="Meeting",
    )
    earlier = "(interval '3 days' + i * interval '1 hour')"  # one meeting an hour, all over
    copies(
        Reservation,
        head,
        HISTORY,
        hold_id="r.hold_id || '_' || i",
        booking_id="r.booking_id || '_' || i",
        hold_token_hash="md5(r.hold_id || i)",
        start_time=f"r.start_time - {earlier}",
        end_time=f"r.end_time - {earlier}",
    )
    copies(
        BookingInvite,
        invite,
        HISTORY,
        booking_id="r.booking_id || '_' || i",
        uid="r.uid || i",
        start_time=f"r.start_time - {earlier}",
        end_time=f"r.end_time - {earlier}",
    )
    with CaptureQueriesContext(connection) as queries:
        assert invites_cancel_ended() == 0
        assert invites_update_moved() == 0
    sweeps = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT "inboxes_bookinginvite"."id"')
    ]
    assert len(sweeps) == 2

    for sweep in sweeps:
        # The told end, and (the update sweep) the invites of the bookings ahead, by booking id; then the
        # invites found, by id.
        read = {"booking_invite_open_until", "booking_invite_once_per_booking", "inboxes_bookinginvite_pkey"}
        assert_bounded(sweep, "inboxes_bookinginvite", through=read, analyze=("bookings_reservation",))
        by_id = [n for n in nodes(explained(sweep)) if n.get("Index Name") == "inboxes_bookinginvite_pkey"]
        assert all("= ANY" in n["Index Cond"] for n in by_id), by_id  # never every id after the last batch
        # The bookings ahead through the exclusion constraint's index of live spans; an invite's by id.
        assert not unbounded_reads(explained(sweep), "bookings_reservation")
