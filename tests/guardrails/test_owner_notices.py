"""The owners are told the first time in a UTC day an agent meets a limit: one email, one notice on the
dashboard, whatever the number of refusals or processes that saw them."""

from __future__ import annotations

import time
from typing import Any

from agentcal import broker
from guardrails.models import LimitNotice
from guardrails.selectors import open_notices
from guardrails.services import limit_reached
from tests.guardrails.helpers import set_limits
from tests.helpers import Persona
from tests.webhooks.helpers import wait_until


def test_the_first_refusal_of_the_day_emails_the_owners_once(
    sdr: Persona, owner: Any, make_person: Any, mailoutbox: list[Any], settings: Any, celery_worker: Any
) -> None:
    settings.DASHBOARD_BASE_URL = "https://cal.example.test"
    make_person("ade@acme.test", workspace=sdr.agent.workspace, role="approver")
    set_limits(sdr, requests_per_second=0.01, request_burst=1)
    statuses = [sdr.client.get("/calendars").status_code for _ in range(6)]
    assert statuses == [200] + [429] * 5

    wait_until(lambda: mailoutbox)  # sent by the Celery worker, not the request
    (message,) = mailoutbox
    assert message.to == ["olivia@acme.test"]  # owners only
    assert message.subject == "[AgentCal] sdr reached its request rate"
    assert "0.01 a second, bursts of 1" in message.body
    assert f"https://cal.example.test/w/acme/agents/{sdr.agent.public_id}" in message.body
    (notice,) = open_notices(sdr.agent.workspace)
    assert (notice.agent_id, notice.limit) == (sdr.agent.pk, "requests")

    # More refusals, later the same day: not marked first of the day, so nothing is sent; and should
    # another process have seen a first refusal too, the day's notice exists and nothing is sent.
    assert sdr.client.get("/calendars").status_code == 429
    assert broker.wait_idle(timeout=10)
    assert limit_reached(agent_pk=sdr.agent.pk, limit="requests") is None
    time.sleep(0.5)
    assert len(mailoutbox) == 1 and LimitNotice.objects.count() == 1
