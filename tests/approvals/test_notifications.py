"""The workspace owner is emailed a link to the queue; never an approve/deny link."""

from __future__ import annotations

import re
import socket

from approvals.models import Approval
from tests.approvals.helpers import created, request_approval
from tests.webhooks.helpers import wait_until


def test_the_owner_gets_one_email_linking_to_the_queue_and_no_decision_link(
    sdr, owner, teammate, mailoutbox, settings, celery_worker
):
    settings.DASHBOARD_BASE_URL = "https://cal.example.test"
    approval = created(request_approval(sdr, summary="Wire the deposit to Initech"))

    wait_until(lambda: mailoutbox)  # sent by the Celery worker, not the request
    (message,) = mailoutbox
    assert message.to == ["olivia@acme.test"]  # the owner; not the ordinary member
    assert "Wire the deposit to Initech" in message.subject
    queue_link = f"https://cal.example.test/w/acme/approvals/{approval['id']}"
    # The only link is the queue's, which needs a signed-in person: nothing in the email decides.
    assert re.findall(r"https?://\S+", message.body) == [queue_link]
    assert not re.search(r"approve|deny|token|sig=", message.body.lower())


def test_a_mail_server_that_is_down_does_not_fail_the_request(sdr, owner, settings, caplog, celery_worker):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port

    approval = created(request_approval(sdr))
    assert Approval.objects.get(public_id=approval["id"]).status == "pending"
    wait_until(lambda: "could not email approval" in caplog.text)
