"""What the owners are told: the first time in a UTC day an agent meets one of its limits."""

from __future__ import annotations

from django.db import models

from workspaces.models import Agent, Workspace

# Each limit a notice names (a 429's limit name), as people read it: "sdr reached its request rate" (the
# owners' email, the dashboard's notices).
LIMIT_WORDS = {
    "requests": "its request rate",
    "searches": "its searches per minute",
    "in_flight": "its requests in progress at once",
    "live_holds": "its live holds at once",
    "bookings_per_day": "its bookings per day",
}


class LimitNotice(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="limit_notices")
    # The limit's name as the 429 says it: requests, searches, in_flight, live_holds, bookings_per_day.
    limit = models.CharField(max_length=32)
    day = models.DateField()  # UTC
    created_at = models.DateTimeField(auto_now_add=True)
    # Cleared from the dashboard's notices by a person (the row stays: it is the day's record).
    dismissed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One notice (and one email) per agent, limit and day, however many processes saw it first.
            models.UniqueConstraint(fields=["agent", "limit", "day"], name="limit_notice_once_a_day"),
        ]
        indexes = [models.Index(fields=["workspace", "-created_at"], name="limit_notice_recent")]

    def __str__(self) -> str:
        return f"{self.agent_id} met {self.limit} on {self.day}"
