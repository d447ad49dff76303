"""The calendar page's "Upstream calendar" panel: whether the calendar is linked to its owner's own
calendar, how its sync is doing, and what could not be read there."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from bookings.models import Calendar
from dashboard.forms import ConnectForm
from dashboard.wording import provider_name
from sync.models import Connection, ConnectionStatus, UpstreamEvent
from sync.oauth import OAuthApp, oauth_apps
from sync.selectors import calendar_connection, unreadable_events, whole_span_events

# Upstream events that could not be read, listed by name on the panel (the count is always shown).
UNREADABLE_LISTED = 5


@dataclass
class ConnectionPanel:
    """What the calendar page's "Upstream calendar" panel shows."""

    calendar: Calendar
    connection: Connection | None
    can_manage: bool
    now: datetime  # the database's clock, as the rest of the page
    form: ConnectForm
    oauth_apps: list[OAuthApp] = field(default_factory=list)
    unreadable_count: int = 0
    unreadable: list[UpstreamEvent] = field(default_factory=list)
    # Series too costly to expand, each blocking its whole span.
    whole_span: list[UpstreamEvent] = field(default_factory=list)

    @property
    def provider_name(self) -> str:
        return provider_name(self.connection.provider) if self.connection else ""

    @property
    def is_failing(self) -> bool:
        return self.connection is not None and self.connection.status == ConnectionStatus.FAILING

    @property
    def next_sync(self) -> str:
        """ "due now", "in 40 s", "in 12 min", "in 1 h 5 min" (a failing link backs off up to an hour)."""
        if self.connection is None:
            return ""
        seconds = math.ceil((self.connection.next_sync_at - self.now).total_seconds())
        if seconds <= 0:
            return "due now"
        if seconds < 60:
            return f"in {seconds} s"
        minutes = math.ceil(seconds / 60)
        if minutes < 60:
            return f"in {minutes} min"
        return f"in {minutes // 60} h" + (f" {minutes % 60} min" if minutes % 60 else "")


def connection_panel(
    calendar: Calendar, *, can_manage: bool, now: datetime, form: ConnectForm | None = None
) -> ConnectionPanel:
    connection = calendar_connection(calendar)
    panel = ConnectionPanel(
        calendar=calendar,
        connection=connection,
        can_manage=can_manage,
        now=now,
        form=form or ConnectForm(),
        oauth_apps=oauth_apps(),
    )
    if connection is not None:
        panel.unreadable_count, panel.unreadable = unreadable_events(connection, listed=UNREADABLE_LISTED)
        panel.whole_span = whole_span_events(connection, listed=UNREADABLE_LISTED)
    return panel
