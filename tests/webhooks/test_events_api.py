"""GET /v1/events: the agent's outbox, filtered by exact type or family as subscriptions are."""

from __future__ import annotations

from tests.helpers import create_calendar, slot


def test_events_filter_by_family_as_subscriptions_do_and_refuse_unknown_types(sdr, webhook_settings):
    cal = create_calendar(sdr)
    hold = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=62)).json()
    sdr.client.delete(f"/holds/{hold['id']}", params={"hold_token": hold["hold_token"]}).raise_for_status()

    family = sdr.client.get("/events", params={"type": "hold.*"})
    exact = sdr.client.get("/events", params={"type": "hold.released"})
    unknown = sdr.client.get("/events", params={"type": "hold.nope"})

    assert family.status_code == 200, family.text
    assert [e["type"] for e in family.json()["results"]] == ["hold.released", "hold.created"]
    assert [e["type"] for e in exact.json()["results"]] == ["hold.released"]
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_request", unknown.text
    assert "type" in unknown.json()["errors"]
