"""A workspace's own inbound domain counts only once a real DNS server has shown its TXT record: before
that, mail to it is refused at RCPT, agents' mail to it goes out through the relay like any other
domain's, and it names no address and signs nothing. The squatting the proof prevents: another
workspace claiming a domain that is not its own (here gmail.com) to receive its users' mail."""

from __future__ import annotations

import smtplib

import pytest

from inboxes.addresses import agent_address
from inboxes.delivery import message_deliver
from inboxes.mail_settings import inbound_domain_set, inbound_domain_verify
from inboxes.models import Message, MessageStatus
from tests.helpers import Persona
from tests.inboxes.dns_server import dns_server  # noqa: F401 (fixture)
from tests.inboxes.helpers import mail
from tests.inboxes.test_sending import sink  # noqa: F401 (fixture)
from workspaces.actor import Actor


def claim(persona: Persona, domain: str) -> Actor:
    """Ask for `domain` as the persona's workspace's inbound domain, as its owner would."""
    owner = Actor(workspace=persona.agent.workspace, agent=None, user_email="owner@example.com")
    assert inbound_domain_set(actor=owner, domain=domain) == domain
    return owner


def send_and_deliver(sender: Persona, to: str) -> Message:
    """Send over the API, then run the delivery here (what the worker would do)."""
    response = sender.client.post("/inbox/send", json={"to": [to], "subject": "Pricing", "text": "Hi."})
    assert response.status_code == 202, response.text
    message = Message.objects.get(public_id=response.json()["id"])
    assert message_deliver(message.pk) == MessageStatus.SENT
    return message


def test_a_squatted_domain_gets_none_of_the_mail_sent_to_it(sdr, make_agent, smtp_port, sink):  # noqa: F811
    sales = make_agent("sales", workspace="globex")
    claim(sales, "gmail.com")

    # Another workspace's agent writes to the real sales@gmail.com: it goes to the relay, not to the
    # squatter's inbox.
    send_and_deliver(sdr, "sales@gmail.com")

    ((envelope, _),) = sink.received
    assert envelope == ["sales@gmail.com"]
    assert not Message.objects.filter(agent=sales.agent).exists()
    # Mail from outside for the domain is not taken either...
    with (
        pytest.raises(smtplib.SMTPRecipientsRefused) as refused,
        smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client,
    ):
        client.send_message(mail("sales@gmail.com"), from_addr="ana@example.com")
    ((code, reply),) = refused.value.recipients.values()
    assert code == 550 and b"5.7.1" in reply
    # ...and the squatter's own mail is not from, nor signed as, gmail.com.
    assert agent_address(sales.agent) == "sales@globex.agentcal.localhost"
    send_and_deliver(sales, "ana@example.com")
    (_, sent) = sink.received[1]
    assert sent["From"].addresses[0].addr_spec == "sales@globex.agentcal.localhost"
    assert sent["Message-ID"].endswith("@globex.agentcal.localhost>")


def test_a_proven_domain_gets_its_mail_locally(sdr, make_agent, smtp_port, sink, dns_server):  # noqa: F811
    sales = make_agent("sales", workspace="globex")
    owner = claim(sales, "globex.test")
    dns_server.publish(
        "_agentcal.globex.test", f"agentcal-verification={sales.agent.workspace.inbound_domain_token}"
    )

    assert inbound_domain_verify(actor=owner) == "globex.test"

    sales.agent.workspace.refresh_from_db()
    assert agent_address(sales.agent) == "sales@globex.test"
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        client.send_message(mail("sales@globex.test"), from_addr="ana@example.com")  # accepted at RCPT
    send_and_deliver(sdr, "sales@globex.test")
    assert sink.received == []  # delivered into the inbox, not to the relay
    assert Message.objects.filter(agent=sales.agent, direction="inbound", subject="Pricing").exists()
