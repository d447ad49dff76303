"""An agent reads its own inbox over the API, and nobody else's."""

from __future__ import annotations

from django.core.files.storage import default_storage

from inboxes.models import Message
from tests.inboxes.helpers import address_of, deliver_raw, mail


def received(persona, **kwargs) -> Message:
    message = mail(address_of(persona), **kwargs)
    message.add_attachment(b"<script>alert(1)</script>", maintype="text", subtype="html", filename="x.html")
    message.add_attachment(b"\x89PNG data", maintype="image", subtype="png", filename="pic.png")
    (delivered,) = deliver_raw(message.as_bytes(), [address_of(persona)])
    return delivered


def test_the_inbox_reports_its_address_and_quota(sdr, settings):
    response = sdr.client.get("/inbox")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["address"] == "sdr@acme.agentcal.localhost"
    # The full quota report is tested in test_quotas.py.
    assert body["quota"]["daily_limit"] == settings.INBOX_DAILY_SEND_LIMIT
    assert body["quota"]["sent_today"] == 0


def test_an_agent_reads_its_threads_and_messages(sdr):
    message = received(sdr, message_id="a@example.com")
    threads = sdr.client.get("/inbox/threads").json()
    assert [t["id"] for t in threads["results"]] == [message.thread.public_id]
    assert threads["next_cursor"] is None

    thread = sdr.client.get(f"/inbox/threads/{message.thread.public_id}").json()
    (shown,) = thread["messages"]
    assert shown["id"] == message.public_id
    assert shown["from"] == {"name": "Ana Lopez", "address": "ana@example.com"}
    assert shown["untrusted"] is True
    assert shown["auth"] == {"spf": "none", "dkim": "none", "dmarc": "none"}
    assert [a["filename"] for a in shown["attachments"]] == ["x.html", "pic.png"]

    listed = sdr.client.get("/inbox/messages", params={"thread": message.thread.public_id}).json()
    assert [m["id"] for m in listed["results"]] == [message.public_id]
    later = sdr.client.get("/inbox/messages", params={"since": "2999-01-01T00:00:00Z"}).json()
    assert later["results"] == []
    detail = sdr.client.get(f"/inbox/messages/{message.public_id}")
    assert detail.status_code == 200 and detail.json()["message_id"] == "a@example.com"


def test_the_raw_message_downloads_as_rfc822(sdr):
    message = received(sdr)
    response = sdr.client.get(f"/inbox/messages/{message.public_id}/raw")
    assert response.status_code == 200
    assert response.headers["content-type"] == "message/rfc822"
    assert response.headers["content-disposition"].startswith("attachment")
    assert message.raw is not None
    assert response.content == bytes(message.raw.raw)


def test_attachments_download_as_attachments_and_only_safe_types_keep_their_type(sdr):
    message = received(sdr)
    html, png = message.attachments.order_by("pk")
    response = sdr.client.get(f"/inbox/messages/{message.public_id}/attachments/{html.public_id}")
    assert response.status_code == 200
    assert response.content == b"<script>alert(1)</script>"
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == 'attachment; filename="x.html"'
    assert response.headers["x-content-type-options"] == "nosniff"
    response = sdr.client.get(f"/inbox/messages/{message.public_id}/attachments/{png.public_id}")
    assert response.headers["content-type"] == "image/png"
    assert response.content == b"\x89PNG data"


def test_an_attachment_named_with_a_path_downloads_under_its_last_part(sdr):
    message = received(sdr)
    html, png = message.attachments.order_by("pk")
    for written, offered in (
        ("../../etc/passwd", "passwd"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("../..", None),
    ):
        html.filename = written
        html.save(update_fields=["filename"])
        response = sdr.client.get(f"/inbox/messages/{message.public_id}/attachments/{html.public_id}")
        assert (
            response.headers["content-disposition"] == f'attachment; filename="{offered or html.public_id}"'
        )
    listed = sdr.client.get(f"/inbox/messages/{message.public_id}").json()["attachments"]
    assert listed[0]["filename"] == "../.."  # the sender's words are kept as written


def test_attachments_are_files_in_storage_named_by_id_and_go_with_their_agent(
    sdr, django_capture_on_commit_callbacks
):
    message = received(sdr)
    html, png = message.attachments.order_by("pk")
    # Stored through Django's storage API, under the attachment's id: the sender's filename names nothing.
    assert html.file.name == f"inbox-attachments/{html.public_id}"
    assert default_storage.open(str(png.file.name)).read() == b"\x89PNG data"

    with django_capture_on_commit_callbacks(execute=True):
        sdr.agent.delete()  # with its messages and their attachments
    assert not any(default_storage.exists(str(a.file.name)) for a in (html, png))


def test_another_agents_mail_is_not_found(sdr, exec_assistant, outsider):
    message = received(sdr)
    attachment = message.attachments.get(filename="pic.png")
    for persona in (exec_assistant, outsider):
        for path in (
            f"/inbox/messages/{message.public_id}",
            f"/inbox/messages/{message.public_id}/raw",
            f"/inbox/messages/{message.public_id}/attachments/{attachment.public_id}",
            f"/inbox/threads/{message.thread.public_id}",
        ):
            assert persona.client.get(path).status_code == 404, (persona.agent.slug, path)
        assert persona.client.get("/inbox/threads").json()["results"] == []
        assert persona.client.get("/inbox/messages").json()["results"] == []


def test_a_key_without_inbox_read_is_refused(make_agent):
    reader = make_agent("calendar-only", scopes=["calendars:read"])
    response = reader.client.get("/inbox")
    assert response.status_code == 403
    assert reader.client.get("/inbox/threads").status_code == 403
