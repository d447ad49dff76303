"""The dashboard's forms: parsing only. The rules are the services' own (the agent API's CalendarInput,
sync's connection_create, guardrails' limits), so a page cannot set up what the API would refuse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django import forms
from django.db import models
from rest_framework import serializers

from agentcal.moments import zone_for_place
from bookings.api.calendars import CalendarInput
from bookings.models import Calendar
from dashboard.wording import number_text
from guardrails.selectors import Setting

# How the settings form names each number, in what unit, and what it does (its bounds are CalendarInput's).
SETTING_FIELDS = {
    "slot_minutes": ("Slot length", "minutes", "The grid agents are offered free slots on."),
    "hold_ttl_seconds": ("Hold lifetime", "seconds", "How long a hold lasts unless its agent extends it."),
    "bump_window_seconds": (
        "Bump window",
        "seconds",
        "How long a new booking may still be taken over by a higher priority; 0: never.",
    ),
    "max_booking_minutes": ("Longest booking", "minutes", "The longest hold or booking agents may make."),
}
# The rules' numbers, on the settings page only (a new calendar starts without rules).
RULE_FIELDS = {
    "buffer_before_minutes": (
        "Buffer before",
        "minutes",
        "Free time kept before anything on this calendar: nothing else may end closer to its start.",
    ),
    "buffer_after_minutes": (
        "Buffer after",
        "minutes",
        "Free time kept after anything on this calendar: nothing else may start closer to its end.",
    ),
    "min_notice_minutes": (
        "Minimum notice",
        "minutes",
        "Nothing may be held or booked to start sooner than this from now.",
    ),
}
SETTING_LABELS = {
    "name": "name",
    "timezone": "time zone",
    "slot_minutes": "slot length",
    "hold_ttl_seconds": "hold lifetime",
    "bump_window_seconds": "bump window",
    "max_booking_minutes": "longest booking",
    "working_hours": "working hours",
    "date_overrides": "date overrides",
    "buffer_before_minutes": "buffer before",
    "buffer_after_minutes": "buffer after",
    "min_notice_minutes": "minimum notice",
}


class CalendarForm(forms.Form):
    """Parsing only (text to numbers). The rules (bounds, time zones) are the agent API's CalendarInput,
    applied by settings(), so a calendar cannot be set up in the dashboard in a way the API refuses."""

    name = forms.CharField(max_length=200, strip=True)
    timezone = forms.CharField(max_length=64, strip=True)
    slot_minutes = forms.IntegerField(required=False)
    hold_ttl_seconds = forms.IntegerField(required=False)
    bump_window_seconds = forms.IntegerField(required=False)
    max_booking_minutes = forms.IntegerField(required=False)
    buffer_before_minutes = forms.IntegerField(required=False)
    buffer_after_minutes = forms.IntegerField(required=False)
    min_notice_minutes = forms.IntegerField(required=False)

    def clean_timezone(self) -> str:
        # A place typed without its region ("Berlin") is the one zone it names; anything else goes on
        # to the API's rules, which refuse an unknown name.
        typed: str = self.cleaned_data["timezone"]
        return zone_for_place(typed) or typed

    @classmethod
    def of(cls, calendar: Calendar) -> CalendarForm:
        names = ("name", "timezone", *SETTING_FIELDS, *RULE_FIELDS)
        return cls(initial={name: getattr(calendar, name) for name in names})

    def settings(self, *, partial: bool, rules: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The settings, checked by the API's rules; None (with the errors on the form) if any is refused.
        A blank number means the default when creating, and "unchanged" when editing (`partial`).
        `rules`: working hours and date overrides as the API takes them (the rules editor's)."""
        if not self.is_valid():
            return None
        data = {name: value for name, value in self.cleaned_data.items() if value is not None}
        data.update(rules or {})
        checked = CalendarInput(data=data, partial=partial)
        if not checked.is_valid():
            for name, problems in checked.errors.items():
                for problem in problems:
                    self.add_error(name if name in self.fields else None, str(problem))
            return None
        return dict(checked.validated_data)


def setting_fields(
    form: CalendarForm, specs: dict[str, tuple[str, str, str]] = SETTING_FIELDS
) -> list[tuple[Any, str, str, Any, Any, Any, str]]:
    """(bound field, label, unit, lowest, highest, default, what it does) per number, for
    _calendar_fields.html."""
    rules = CalendarInput().fields
    fields = []
    for name, (label, unit, hint) in specs.items():
        bounds = rules[name]
        assert isinstance(bounds, serializers.IntegerField)
        model_field = Calendar._meta.get_field(name)
        assert isinstance(model_field, models.Field)
        default = model_field.default
        fields.append((form[name], label, unit, bounds.min_value, bounds.max_value, default, hint))
    return fields


class ConnectForm(forms.Form):
    """Parsing only; whether the server takes these credentials is connection_create's to find out."""

    url = forms.URLField(max_length=2048, assume_scheme="https")
    username = forms.CharField(max_length=320)
    password = forms.CharField(max_length=1024, strip=False)


class LimitsForm(forms.Form):
    """An agent's own limits, or the workspace's defaults, as typed: blank inherits the level above. Kept
    as text, so a refused value comes back as typed beside the words guardrails.services refused it with."""

    requests_per_second = forms.CharField(required=False, max_length=32, strip=True)
    request_burst = forms.CharField(required=False, max_length=32, strip=True)
    searches_per_minute = forms.CharField(required=False, max_length=32, strip=True)
    live_holds = forms.CharField(required=False, max_length=32, strip=True)
    bookings_per_day = forms.CharField(required=False, max_length=32, strip=True)

    @classmethod
    def of(cls, settings: Sequence[Setting]) -> LimitsForm:
        return cls(initial={s.name: "" if s.own is None else number_text(s.own) for s in settings})

    def limits(self) -> dict[str, str] | None:
        """Every limit as typed (blank: inherit), or None with the form's errors."""
        return {name: self.cleaned_data[name] for name in self.fields} if self.is_valid() else None

    def refused(self, errors: Mapping[str, Sequence[str]]) -> None:
        """Show the service's refusal (InvalidRequest's `errors`, by limit) beside each field."""
        for name, problems in errors.items():
            for problem in problems:
                self.add_error(name if name in self.fields else None, problem)
