"""POST/GET/DELETE /v1/webhook-endpoints: secrets shown once, SSRF refused, agents isolated."""

from __future__ import annotations

import pytest

from audit.models import AuditRecord
from tests.helpers import create_calendar, slot
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/hook",
        "http://[::1]/hook",
        "ftp://example.com/hook",
        "http://user:pass@example.com/hook",
    ],
)
def test_it_refuses_internal_or_malformed_urls(sdr, url, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    response = sdr.client.post("/webhook-endpoints", json={"url": url, "events": ["*"]})
    assert response.status_code == 400, response.text
    assert response.json()["error"] in {"unsafe_webhook_url", "invalid_request"}
    assert WebhookEndpoint.objects.count() == 0
    assert AuditRecord.objects.filter(outcome="rejected", http_status=400).count() == 1


def test_the_secret_is_shown_once_and_the_creation_audited(sdr, webhook_settings):
    created = sdr.client.post(
        "/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "events": ["hold.*", "booking.bumped"]}
    )
    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith("whsec_")
    assert body["events"] == ["booking.bumped", "hold.*"] and body["status"] == "active"
    fetched = sdr.client.get(f"/webhook-endpoints/{body['id']}").json()
    assert "secret" not in fetched
    assert [e["id"] for e in sdr.client.get("/webhook-endpoints").json()["results"]] == [body["id"]]
    assert AuditRecord.objects.filter(event_type="webhook.endpoint.created").count() == 1


def test_unknown_event_types_are_refused(sdr, webhook_settings):
    response = sdr.client.post(
        "/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "events": ["hold.exploded"]}
    )
    assert response.status_code == 400
    assert "events" in response.json()["errors"]


def test_another_agent_cannot_see_or_delete_an_endpoint(sdr, exec_assistant, outsider, webhook_settings):
    endpoint = sdr.client.post(
        "/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "events": ["*"]}
    ).json()
    for other in (exec_assistant, outsider):
        assert other.client.get(f"/webhook-endpoints/{endpoint['id']}").status_code == 404
        assert other.client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 404
        assert other.client.get(f"/webhook-endpoints/{endpoint['id']}/deliveries").status_code == 404
        assert other.client.get("/webhook-endpoints").json()["results"] == []


def test_deleting_disables_the_endpoint_and_cancels_pending_deliveries(sdr, webhook_settings):
    # Nothing listens on port 9 and no worker runs: the delivery stays pending.
    endpoint = sdr.client.post(
        "/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "events": ["*"]}
    ).json()
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=60)).raise_for_status()
    from webhooks.outbox import outbox_dispatch

    outbox_dispatch()
    assert WebhookDelivery.objects.get().status == DeliveryStatus.PENDING

    deleted = sdr.client.delete(f"/webhook-endpoints/{endpoint['id']}")
    assert deleted.status_code == 200 and deleted.json()["status"] == "disabled"
    assert WebhookDelivery.objects.get().status == DeliveryStatus.CANCELLED
    assert AuditRecord.objects.filter(event_type="webhook.endpoint.disabled").count() == 1


def test_webhook_endpoints_need_the_webhooks_scope(make_agent):
    reader = make_agent("no-webhooks", scopes=["calendars:read"])
    response = reader.client.post("/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "events": ["*"]})
    assert response.status_code == 403
    assert response.json()["required_scope"] == "webhooks:write"


def test_a_delivery_of_a_deleted_endpoint_is_not_replayed(sdr, webhook_settings):
    endpoint = sdr.client.post(
        "/webhook-endpoints", json={"url": "http://127.0.0.1:9/h", "events": ["*"]}
    ).json()
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=61)).raise_for_status()
    from webhooks.outbox import outbox_dispatch

    outbox_dispatch()
    delivery = WebhookDelivery.objects.get()
    sdr.client.delete(f"/webhook-endpoints/{endpoint['id']}").raise_for_status()

    replay = sdr.client.post(f"/webhook-deliveries/{delivery.public_id}/replay")

    assert replay.status_code == 409, replay.text
    assert replay.json()["error"] == "webhook_endpoint_disabled"
    assert not AuditRecord.objects.filter(event_type="webhook.delivery.replayed").exists()
    assert AuditRecord.objects.filter(event_type="webhook.delivery.replay.rejected").count() == 1
