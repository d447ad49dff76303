"""What the API serves of a message's HTML (sanitized; the original stays at /raw), and unread state:
a message is read once its agent fetches it by id, and only then."""

from __future__ import annotations

from inboxes.models import Message
from tests.inboxes.helpers import address_of, deliver_raw, mail

HOSTILE_HTML = (
    '<p onclick="steal()">Hello <b>there</b></p><script>steal()</script>'
    '<img src="https://tracker.example/pixel.png" alt="pixel"><a href="javascript:steal()">x</a>'
)


def received(persona, **kwargs) -> Message:
    message = mail(address_of(persona), **kwargs)
    message.add_alternative(HOSTILE_HTML, subtype="html")
    (delivered,) = deliver_raw(message.as_bytes(), [address_of(persona)])
    return delivered


def test_the_api_serves_sanitized_html_and_keeps_the_original_in_the_raw_message(sdr):
    message = received(sdr)

    for shown in (
        sdr.client.get(f"/inbox/messages/{message.public_id}").json(),
        sdr.client.get(f"/inbox/threads/{message.thread.public_id}").json()["messages"][0],
        sdr.client.get("/inbox/messages").json()["results"][0],
    ):
        assert "<b>there</b>" in shown["html"]
        for gone in ("onclick", "<script", "steal()", "tracker.example", "javascript:"):
            assert gone not in shown["html"], gone

    raw = sdr.client.get(f"/inbox/messages/{message.public_id}/raw")
    assert b"<script>steal()</script>" in raw.content
    message.refresh_from_db()
    assert "<script>steal()</script>" in message.html  # stored as sent


def test_fetching_a_message_by_id_marks_it_read_once_and_lists_do_not(sdr, exec_assistant):
    first = received(sdr, message_id="one@example.com")
    second = received(sdr, subject="Re: Meeting next week?", in_reply_to="one@example.com")
    thread_id = first.thread.public_id
    assert second.thread.public_id == thread_id

    # Listing threads and messages, or reading the thread, is not reading each message.
    assert sdr.client.get("/inbox/threads").json()["results"][0]["unread"] == 2
    assert [m["read_at"] for m in sdr.client.get("/inbox/messages").json()["results"]] == [None, None]
    assert sdr.client.get(f"/inbox/threads/{thread_id}").json()["unread"] == 2

    # Another agent asking for it reads nothing.
    assert exec_assistant.client.get(f"/inbox/messages/{first.public_id}").status_code == 404
    first.refresh_from_db()
    assert first.read_at is None

    read = sdr.client.get(f"/inbox/messages/{first.public_id}").json()
    assert read["read_at"] is not None
    again = sdr.client.get(f"/inbox/messages/{first.public_id}").json()
    assert again["read_at"] == read["read_at"]  # the first read stays the read time

    assert sdr.client.get("/inbox/threads").json()["results"][0]["unread"] == 1
    assert sdr.client.get(f"/inbox/threads/{thread_id}").json()["unread"] == 1
    second.refresh_from_db()
    assert second.read_at is None
