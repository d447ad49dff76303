"""The agents' inboxes in the dashboard: who may look, what a thread shows, search, paging, downloads.

Mail goes through the real parser (stored raw, then parsed, as the SMTP listener does); outbound
messages, which the sending service writes, are inserted as rows in their final states.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta

from django.db.models.functions import Now

from bookings.engine import booking_create
from dashboard.views import inbox as inbox_views
from inboxes.addresses import agent_address
from inboxes.models import Direction, InboundRaw, Message, MessageStatus, Thread
from inboxes.services import inbound_parse
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    signed_in,
    span_on,
    text,
)
from tests.inboxes.helpers import deliver_raw, mail


def receive(agent, *, minutes_ago: int = 0, **kwargs) -> Message:
    """Mail for `agent`, received `minutes_ago` (within a test's transaction the database's now() stands
    still, so the order of arrival is given)."""
    raw = mail(agent_address(agent), **kwargs).as_bytes()
    row = InboundRaw.objects.create(
        raw=raw,
        envelope_from="ana@example.com",
        envelope_to=[agent_address(agent)],
        received_at=datetime.now(UTC) - timedelta(minutes=minutes_ago),
    )
    (delivered,) = inbound_parse(row.pk)
    return delivered


def inbox_url(agent, suffix: str = "") -> str:
    return f"/w/{agent.workspace.slug}/agents/{agent.public_id}/inbox{suffix}"


def rows_in(html: str) -> int:
    return html.count('data-testid="thread-row"')


# --- Who may look ------------------------------------------------------------------------------------------


def test_owners_and_admins_see_every_agents_inbox_and_members_are_refused(team):
    message = receive(team.sdr, subject="Pricing question")
    receive(team.exec_assistant, subject="Board dinner")
    thread_url = inbox_url(team.sdr, f"/{message.thread.public_id}")

    for person in (team.owner, team.admin):
        client = signed_in(person)
        overview = client.get("/w/acme/inboxes")
        assert overview.status_code == 200
        assert text(overview).count('data-testid="inbox-row"') == 2
        assert "Inboxes</a>" in text(overview)  # the nav entry
        assert "Pricing question" in text(client.get(inbox_url(team.sdr)))
        assert "Board dinner" in text(client.get(inbox_url(team.exec_assistant)))
        assert client.get(thread_url).status_code == 200

    # Members decide approvals and read calendars, but agents' correspondence is for owners and admins.
    member = signed_in(team.member)
    for path in ("/w/acme/inboxes", inbox_url(team.sdr), thread_url):
        assert member.get(path).status_code == 403, path
    approvals = text(member.get("/w/acme/approvals"))
    assert "/w/acme/inboxes" not in approvals
    agent_page = text(member.get(f"/w/acme/agents/{team.sdr.public_id}"))
    assert 'data-testid="agent-inbox-link"' not in agent_page
    owner_agent_page = text(signed_in(team.owner).get(f"/w/acme/agents/{team.sdr.public_id}"))
    assert f'href="{inbox_url(team.sdr)}"' in owner_agent_page


def test_another_workspaces_agents_threads_and_messages_are_not_found(team):
    ours = receive(team.sdr, subject="Ours")
    ours_attachment_message = mail(agent_address(team.sdr), subject="With a file")
    ours_attachment_message.add_attachment(
        b"%PDF-1.4", maintype="application", subtype="pdf", filename="a.pdf"
    )
    (with_file,) = deliver_raw(ours_attachment_message.as_bytes(), [agent_address(team.sdr)])
    attachment = with_file.attachments.get()
    theirs = receive(team.rival, subject="Theirs")
    owner, outsider = signed_in(team.owner), signed_in(team.outsider)

    # The outsider is no member of acme: nothing of it exists for them.
    for path in (
        "/w/acme/inboxes",
        inbox_url(team.sdr),
        inbox_url(team.sdr, f"/{ours.thread.public_id}"),
        inbox_url(team.sdr, f"/messages/{with_file.public_id}/attachments/{attachment.public_id}"),
    ):
        assert outsider.get(path).status_code == 404, path
    # Acme's owner cannot reach globex's agent, thread or message through acme's URLs...
    rival_in_acme = f"/w/acme/agents/{team.rival.public_id}/inbox"
    assert owner.get(rival_in_acme).status_code == 404
    assert owner.get(f"{rival_in_acme}/{theirs.thread.public_id}").status_code == 404
    # ...nor one agent's thread or attachment under another agent of the same workspace.
    assert owner.get(inbox_url(team.exec_assistant, f"/{ours.thread.public_id}")).status_code == 404
    assert (
        owner.get(
            inbox_url(
                team.exec_assistant, f"/messages/{with_file.public_id}/attachments/{attachment.public_id}"
            )
        ).status_code
        == 404
    )
    # ...nor globex's own pages.
    assert owner.get(f"/w/globex/agents/{team.rival.public_id}/inbox").status_code == 404


# --- The thread list ---------------------------------------------------------------------------------------


def test_threads_are_listed_newest_activity_first_with_their_unread_counts(team):
    first = receive(
        team.sdr, subject="Intro call", message_id="intro@example.com", body="Hello there.\n", minutes_ago=30
    )
    receive(team.sdr, subject="Invoice 42", sender="Billing <billing@vendor.example>", minutes_ago=20)
    reply = receive(
        team.sdr,
        minutes_ago=10,
        subject="Re: Intro call",
        in_reply_to="intro@example.com",
        body="Tuesday at 10 works for me.\n\n> Hello there.\n",
    )
    assert reply.thread_id == first.thread_id
    # The agent fetched the first message through the API; the reply is still unread.
    Message.objects.filter(pk=first.pk).update(read_at=Now())

    page = text(signed_in(team.owner).get(inbox_url(team.sdr)))

    assert rows_in(page) == 2
    assert page.index("Intro call") < page.index("Invoice 42")  # the reply made it the latest
    intro_row = page[page.index(f'data-thread="{first.thread.public_id}"') :]
    intro_row = intro_row[: intro_row.index("</tr>")]
    assert 'class="clickable unread"' in page
    assert '<span class="badge">1</span>' in intro_row  # one unread of two
    assert "Ana Lopez &lt;ana@example.com&gt;" in intro_row
    assert "Tuesday at 10 works for me." in intro_row  # the snippet, without the quoted history
    assert "Hello there." not in intro_row
    assert "Billing &lt;billing@vendor.example&gt;" in page
    assert 'data-testid="quota"' in page


def test_looking_at_a_thread_in_the_dashboard_does_not_mark_it_read(team):
    message = receive(team.sdr)
    response = signed_in(team.owner).get(inbox_url(team.sdr, f"/{message.thread.public_id}"))
    assert response.status_code == 200
    message.refresh_from_db()
    assert message.read_at is None


def test_search_matches_sender_names_addresses_and_subjects_and_htmx_gets_only_the_results(team):
    receive(team.sdr, subject="Quarterly pricing", sender="Ana Lopez <ana@example.com>")
    receive(team.sdr, subject="Lunch?", sender="Bo Chen <bo@contoso.example>")
    receive(team.sdr, subject="Contract draft", sender="Legal <legal@firm.example>")
    client = signed_in(team.owner)

    def found(query: str) -> str:
        return text(client.get(inbox_url(team.sdr), {"q": query}))

    assert rows_in(found("pricing")) == 1  # subject, any case
    assert rows_in(found("CONTOSO")) == 1 and "Lunch?" in found("contoso")  # address
    assert rows_in(found("bo chen")) == 1  # display name
    assert rows_in(found("example")) == 3
    nothing = found("no-such-sender")
    assert rows_in(nothing) == 0
    assert "No threads match “no-such-sender”" in nothing

    partial = client.get(inbox_url(team.sdr), {"q": "legal"}, HTTP_HX_REQUEST="true")
    body = text(partial)
    assert body.lstrip().startswith('<div id="thread-results">')
    assert "<html" not in body and 'data-testid="quota"' not in body
    assert rows_in(body) == 1 and "Contract draft" in body


def test_an_empty_inbox_says_where_mail_would_come_from(team):
    page = text(signed_in(team.owner).get(inbox_url(team.exec_assistant)))
    assert 'data-testid="inbox-empty"' in page
    assert "No mail yet" in page
    assert "exec-assistant@acme.agentcal.localhost" in page


def test_threads_are_paged_and_the_search_is_kept_across_pages(team, monkeypatch):
    monkeypatch.setattr(inbox_views, "THREADS_PER_PAGE", 2)
    for n in range(5):
        receive(team.sdr, subject=f"Lead {n}", sender=f"Lead {n} <lead{n}@example.com>", minutes_ago=10 - n)
    receive(team.sdr, subject="Something else", sender="Other <other@else.example>")
    client = signed_in(team.owner)

    first = text(client.get(inbox_url(team.sdr), {"q": "lead"}))
    assert rows_in(first) == 2 and "Lead 4" in first and "Lead 3" in first
    assert "Page 1 of 3" in first
    assert "?q=lead&amp;page=2" in first
    last = text(client.get(inbox_url(team.sdr), {"q": "lead", "page": "3"}))
    assert rows_in(last) == 1 and "Lead 0" in last
    assert "Something else" not in last
    # A page past the end (or not a number) shows the nearest real page rather than failing.
    assert rows_in(text(client.get(inbox_url(team.sdr), {"q": "lead", "page": "99"}))) == 1
    assert rows_in(text(client.get(inbox_url(team.sdr), {"page": "x"}))) == 2


# --- The thread --------------------------------------------------------------------------------------------


def html_mail(agent):
    message = mail(
        agent_address(agent),
        subject="Our offer",
        body="Plain version of the offer.\n",
        Authentication_Results="mx.acme.test; spf=pass smtp.mailfrom=example.com; dkim=fail; dmarc=fail",
    )
    message.add_alternative(
        '<p onclick="steal()">Our <b>offer</b> <a href="javascript:steal()">here</a>'
        ' <a href="https://example.com/offer">details</a></p><script>window.stolen = 1</script>'
        '<img src="https://tracker.example/pixel.png" alt="pixel">',
        subtype="html",
    )
    message.add_attachment(
        b"<script>alert(1)</script>", maintype="text", subtype="html", filename="invoice.html"
    )
    message.add_attachment(b"\x89PNG data", maintype="image", subtype="png", filename="chart.png")
    (delivered,) = deliver_raw(message.as_bytes(), [agent_address(agent)])
    return delivered


def test_a_thread_shows_sanitized_html_sender_checks_and_an_untrusted_notice_under_a_strict_policy(
    team, settings
):
    settings.INBOUND_TRUSTED_AUTHSERV_IDS = ["mx.acme.test"]
    message = html_mail(team.sdr)

    response = signed_in(team.owner).get(inbox_url(team.sdr, f"/{message.thread.public_id}"))
    page = text(response)

    body = page[page.index('data-testid="message-html"') :]
    body = body[: body.index("</div>")]
    assert "<b>offer</b>" in body
    (link,) = re.findall(r'<a [^>]*href="https://example.com/offer"[^>]*>', body)
    assert 'target="_blank"' in link and 'rel="noopener noreferrer nofollow"' in link
    for gone in ("onclick", "javascript:", "<script", "window.stolen", "tracker.example"):
        assert gone not in body, gone
    assert (
        "hx-disable"
        in page[page.index('data-testid="message-html"') - 80 : page.index('data-testid="message-html"')]
    )
    assert 'data-testid="untrusted-notice"' in page
    assert '<span class="auth-chip pass" title="SPF: pass">SPF pass</span>' in page
    assert '<span class="auth-chip fail" title="DKIM: fail">DKIM fail</span>' in page
    assert "Plain version of the offer." in page  # the text part, folded away under the HTML
    # The page's own policy, whatever the installation's: no script but the dashboard's, no remote images.
    policy = {
        directive.split()[0]: directive.split()[1:]
        for directive in response["Content-Security-Policy"].split("; ")
    }
    assert policy["script-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["default-src"] == ["'none'"] and policy["frame-src"] == ["'none'"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]


def test_attachments_always_download_and_only_safe_types_keep_their_type(team):
    message = html_mail(team.sdr)
    html_file, png = message.attachments.order_by("pk")
    client = signed_in(team.owner)
    page = text(client.get(inbox_url(team.sdr, f"/{message.thread.public_id}")))
    html_url = inbox_url(team.sdr, f"/messages/{message.public_id}/attachments/{html_file.public_id}")
    assert f'href="{html_url}" download' in page

    response = client.get(html_url)
    assert response.status_code == 200
    assert response.content == b"<script>alert(1)</script>"
    assert response["Content-Type"] == "application/octet-stream"  # never text/html in our origin
    assert response["Content-Disposition"] == 'attachment; filename="invoice.html"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]

    response = client.get(inbox_url(team.sdr, f"/messages/{message.public_id}/attachments/{png.public_id}"))
    assert response["Content-Type"] == "image/png"
    assert response["Content-Disposition"] == 'attachment; filename="chart.png"'
    assert response["X-Content-Type-Options"] == "nosniff"

    missing = client.get(inbox_url(team.sdr, f"/messages/{message.public_id}/attachments/att_nope"))
    assert missing.status_code == 404


def outbound(agent, thread: Thread, status: str, **fields) -> Message:
    return Message.objects.create(
        agent=agent,
        thread=thread,
        direction=Direction.OUTBOUND,
        status=status,
        from_address={"name": agent.name, "address": agent_address(agent)},
        to=[{"name": "Ana Lopez", "address": "ana@example.com"}],
        subject="Re: Meeting next week?",
        text=f"A reply that is {status}.",
        received_at=Now(),
        **fields,
    )


def test_outbound_messages_show_their_delivery_status_and_link_their_approval(team):
    received = receive(team.sdr)
    thread = received.thread
    outbound(team.sdr, thread, MessageStatus.SENT)
    outbound(team.sdr, thread, MessageStatus.QUEUED)
    outbound(team.sdr, thread, MessageStatus.FAILED, attempts=5, last_error="550 mailbox unavailable")
    outbound(team.sdr, thread, MessageStatus.NOT_SENT_NO_RELAY)
    outbound(team.sdr, thread, MessageStatus.AWAITING_APPROVAL, approval_id="appr_waiting")
    outbound(team.sdr, thread, MessageStatus.DISCARDED, approval_id="appr_denied")

    page = text(signed_in(team.owner).get(inbox_url(team.sdr, f"/{thread.public_id}")))

    assert page.count('data-testid="message"') == 7
    for status, label in [
        ("sent", "sent"),
        ("queued", "queued"),
        ("failed", "failed"),
        ("not_sent_no_relay", "not sent: no relay"),
        ("awaiting_approval", "awaiting approval"),
        ("discarded", "discarded"),
    ]:
        assert f'<span class="pill {status}" data-testid="message-status">{label}</span>' in page, status
    assert 'href="/w/acme/approvals/appr_waiting"' in page
    assert 'href="/w/acme/approvals/appr_denied"' in page
    assert "550 mailbox unavailable" in page
    assert page.count('data-testid="untrusted-notice"') == 1  # only the inbound one


def test_an_invite_shows_its_card_linked_to_the_calendar_day_of_its_booking(team):
    calendar = make_calendar(team.workspace, "Sales team")
    day = future_day()
    booking = booking_create(
        actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(14)), title="Demo"
    ).primary
    message = receive(team.sdr, subject="Cancelled: Demo")
    Message.objects.filter(pk=message.pk).update(
        calendar_event={
            "method": "CANCEL",
            "uid": f"{booking.booking_id}@acme.agentcal.localhost",
            "sequence": 1,
            "start_time": f"{day.isoformat()}T14:00:00Z",
            "end_time": f"{day.isoformat()}T14:30:00Z",
            "summary": "Demo",
            "organizer": "ana@example.com",
            "attendees": [
                {"email": "ana@example.com", "name": "Ana Lopez", "status": "accepted"},
                {"email": "bo@example.com", "name": "", "status": "declined"},
            ],
            "linked": booking.booking_id,
            "flag": "cancelled_by_organizer",
        }
    )

    page = text(signed_in(team.owner).get(inbox_url(team.sdr, f"/{message.thread.public_id}")))

    card = page[page.index('data-testid="invite-card"') :]
    card = card[: card.index("</section>")]
    assert "Cancellation" in card
    assert f"{day.strftime('%a')} {day.day} {day.strftime('%b')} {day.year}, 14:00 – 14:30" in card
    assert "ana@example.com" in card
    assert 'Ana Lopez &lt;ana@example.com&gt; <span class="pill partstat accepted">accepted</span>' in card
    assert 'bo@example.com <span class="pill partstat declined">declined</span>' in card
    assert "Cancelled by the organizer" in card
    calendar_day = f"/w/acme/calendars/{calendar.public_id}?view=day&amp;date={day.isoformat()}"
    assert f'<a href="{calendar_day}" class="mono">{booking.booking_id}</a>' in card
    assert '<span class="pill committed">committed</span>' in card  # the booking stays


def test_an_invite_linked_to_another_workspaces_booking_links_nowhere(team):
    calendar = make_calendar(team.other_workspace, "Globex")
    booking = booking_create(
        actor=actor(team.rival), calendar=calendar, span=span_on(future_day(), time(9)), title="Theirs"
    ).primary
    message = receive(team.sdr, subject="Invite")
    Message.objects.filter(pk=message.pk).update(
        calendar_event={"method": "REQUEST", "linked": booking.booking_id, "attendees": "not a list"}
    )
    page = text(signed_in(team.owner).get(inbox_url(team.sdr, f"/{message.thread.public_id}")))
    linked = page[page.index('data-testid="invite-linked"') :]
    linked = linked[: linked.index("</dd>")]
    assert calendar.public_id not in page
    assert "/calendars/" not in linked
