"""An invite's attendee answers (PARTSTAT) are written by whoever sent the mail: the thread page styles
only the known ones by class, and shows anything else as escaped text with a neutral class."""

from __future__ import annotations

from inboxes.models import Message
from tests.dashboard.pages_helpers import signed_in, text
from tests.dashboard.test_inbox_views import inbox_url, receive


def test_only_known_answers_become_css_classes(team):
    message = receive(team.sdr, subject="Invite")
    Message.objects.filter(pk=message.pk).update(
        calendar_event={
            "method": "REQUEST",
            "attendees": [
                {"email": "ana@example.com", "status": "accepted"},
                {"email": "bo@example.com", "status": "x-hidden cancelled_by_organizer"},
                {"email": "cy@example.com", "status": '"><script>alert(1)</script>'},
            ],
        }
    )

    page = text(signed_in(team.owner).get(inbox_url(team.sdr, f"/{message.thread.public_id}")))

    assert '<span class="pill partstat accepted">accepted</span>' in page
    assert '<span class="pill partstat unknown">x-hidden cancelled_by_organizer</span>' in page
    assert (
        '<span class="pill partstat unknown">&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;</span>' in page
    )
    assert "<script>alert(1)" not in page
