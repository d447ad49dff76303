"""Event-type patterns, as the audit trail's filter and webhook subscriptions take them: an exact type
(`calendar.hold.created`), or a family (`calendar.hold.*`), every type that starts with what precedes
the `*`."""

from __future__ import annotations

from django.db.models import Q


def matches(pattern: str, event_type: str) -> bool:
    if pattern.endswith(".*"):
        return event_type.startswith(pattern[:-1])
    return event_type == pattern


def matching(pattern: str, field: str = "event_type") -> Q:
    """The rows whose `field` the pattern matches."""
    if pattern.endswith(".*"):
        return Q(**{f"{field}__startswith": pattern[:-1]})
    return Q(**{field: pattern})
