"""Every event type the audit trail records is an AuditEvent: the API's refusals are `<action>.rejected`
for their view's `audit_action`, so every action has its member, and the filter knows every type."""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver

from audit.events import AuditEvent


def views(patterns: list[Any]) -> list[type]:
    found: list[type] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += views(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            view = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
            if view is not None:
                found.append(view)
    return found


def test_every_views_refusal_is_an_audit_event() -> None:
    actions = {
        action for view in views(get_resolver().url_patterns) if (action := getattr(view, "audit_action", ""))
    }
    assert len(actions) > 10  # not vacuous: the agent API's views were found
    assert (
        sorted(f"{action}.rejected" for action in actions if f"{action}.rejected" not in AuditEvent.values)
        == []
    )


def test_an_unknown_event_type_or_family_is_400_and_a_known_one_filters(sdr) -> None:
    for unknown in ("nope", "calendar.hold.create", "nothing.*"):
        response = sdr.client.get("/audit", params={"event_type": unknown})
        assert response.status_code == 400, (unknown, response.text)
        assert list(response.json()["errors"]) == ["event_type"]
    for known in ("calendar.hold.created", "calendar.hold.*", "webhook.events.rejected"):
        assert sdr.client.get("/audit", params={"event_type": known}).status_code == 200


def test_a_refused_read_is_audited_under_its_views_own_event(sdr) -> None:
    response = sdr.client.get("/webhook-deliveries/whd_nosuchdelivery00000000")
    assert response.status_code == 404
    listed = sdr.client.get("/audit", params={"event_type": "webhook.*"}).json()["results"]
    assert listed and listed[0]["failure_reason"] == "not_found", listed
