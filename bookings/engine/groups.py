"""What the engine hands back: a hold or booking as its group of rows, one per calendar."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from bookings.models import Reservation


@dataclass
class ReservationGroup:
    """A hold or booking: one row per calendar, primary row first."""

    rows: list[Reservation]
    hold_token: str | None = None  # only right after creation; never stored raw
    displaced: list[Reservation] = field(default_factory=list)

    @property
    def primary(self) -> Reservation:
        return self.rows[0]


def ordered(rows: Iterable[Reservation]) -> list[Reservation]:
    return sorted(rows, key=lambda r: (not r.is_primary, r.calendar_id))


def groups(rows: Iterable[Reservation]) -> list[list[Reservation]]:
    """Rows of several holds/bookings, grouped per hold, each group primary first."""
    by_hold: dict[str, list[Reservation]] = {}
    for row in rows:
        by_hold.setdefault(row.hold_id, []).append(row)
    return [ordered(group) for _, group in sorted(by_hold.items())]


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()
