"""Hold → booking conversion: one definition for every page that shows it (the agents list per agent, the
metrics page per workspace and window), so their numbers can be checked against each other."""

from __future__ import annotations

# Shown beside the number wherever it appears; a booking made without a hold is in neither count.
CONVERSION_DEFINITION = "Holds booked ÷ holds placed"
CONVERSION_EXCLUDES = "Bookings made without a hold are not counted."


def conversion_percent(*, holds: int, commits_from_holds: int) -> int | None:
    """Percent of `holds` that became bookings; None when there is no hold to convert."""
    return round(100 * commits_from_holds / holds) if holds else None
