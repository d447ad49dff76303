"""Agent API for calendars, availability, holds, commits and bookings (views parse, call, render)."""

from bookings.api.availability import AvailabilitySearchView, AvailabilityView
from bookings.api.calendars import CalendarDetailView, CalendarInput, CalendarListView
from bookings.api.commits import BookingDetailView, BookingListView, BookingMoveView, CommitCreateView
from bookings.api.common import calendar_for
from bookings.api.holds import FindAndHoldView, HoldCreateView, HoldDetailView, HoldExtendView

__all__ = [
    "AvailabilitySearchView",
    "AvailabilityView",
    "BookingDetailView",
    "BookingListView",
    "BookingMoveView",
    "CalendarDetailView",
    "CalendarInput",
    "CalendarListView",
    "CommitCreateView",
    "FindAndHoldView",
    "HoldCreateView",
    "HoldDetailView",
    "HoldExtendView",
    "calendar_for",
]
