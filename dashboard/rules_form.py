"""The calendar rules editor's form: weekly working hours and date overrides as plain POST fields (works
without JavaScript), read into the agent API's JSON and checked by bookings.rules.parse_rules, each
problem kept beside the day it is about. Field names: `hours` ("any" | "weekly"); per weekday
`mon-open`, `mon-start`, `mon-end` (repeated, one pair per interval); per override row n `ov-n-date`,
`ov-n-open`, `ov-n-start`, `ov-n-end`. A submit button named `edit` adds or removes a row without saving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from bookings.models import Calendar
from bookings.rules import WEEKDAYS, InvalidRules, parse_rules

DAY_NAMES = dict(
    zip(WEEKDAYS, ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"), strict=True)
)
# What "Set working hours" starts from on a calendar open at any time: a plain office week.
OFFICE_WEEK = {day: [["09:00", "17:00"]] if day in WEEKDAYS[:5] else [] for day in WEEKDAYS}
_SPARE_INTERVAL = ("09:00", "17:00")  # shown (hidden by CSS) under a closed day, for when it is opened
_OVERRIDE_DATE_FIELD = re.compile(r"ov-(\d+)-date")
_TYPED_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?")
_ERROR_PATH = re.compile(r"(working_hours|date_overrides)(?:\.([^\[]+))?(?:\[(\d+)\])?")
# parse_rules speaks the API's JSON; a person editing a form reads times and days.
_PAIR = re.compile(r'\["(\d\d:\d\d)", "(\d\d:\d\d)"\]')
_INDEX_REFERENCE = re.compile(r"\s\S+\[\d+\] ")
_WORDING = (
    ("list a day's intervals in order, without overlap", "a day's times may not overlap"),
    (
        'end this interval at "24:00" and start the next day at "00:00"',
        "end at 00:00 (midnight) and open the next day from 00:00",
    ),
    ("intervals a day", "times a day"),
)


@dataclass
class Interval:
    start: str  # "HH:MM" as the time input shows it; an end of "00:00" is midnight, the day's end
    end: str
    invalid: bool = False

    @property
    def complete(self) -> bool:
        return bool(self.start and self.end)


@dataclass
class Day:
    """A weekday's or a date override's row: open or closed, and its times."""

    key: str  # the field prefix: "mon", or "ov-3" for an override
    label: str
    open: bool
    intervals: list[Interval]
    date: str = ""  # overrides only: "YYYY-MM-DD"
    errors: list[str] = field(default_factory=list)

    @property
    def index(self) -> str:
        return self.key.removeprefix("ov-")

    def hours_json(self) -> list[list[str]]:
        if not self.open:
            return []
        # A time input cannot show 24:00: an end of 00:00 means midnight at the end of the day.
        return [[i.start, "24:00" if i.end == "00:00" else i.end] for i in self.intervals if i.complete]

    def check_complete(self) -> None:
        if not self.open:
            return
        half_filled = [i for i in self.intervals if (i.start or i.end) and not i.complete]
        for interval in half_filled:
            interval.invalid = True
        if half_filled:
            self.errors.append("Give each time a start and an end.")
        if not any(i.complete for i in self.intervals):
            self.errors.append(f"Add opening times, or mark {self.label} closed.")


@dataclass
class RulesEditor:
    any_time: bool
    days: list[Day]
    overrides: list[Day]
    errors: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, calendar: Calendar) -> RulesEditor:
        week = calendar.working_hours if calendar.working_hours is not None else OFFICE_WEEK
        days = [_day(name, DAY_NAMES[name], week.get(name, [])) for name in WEEKDAYS]
        overrides = [
            _day(f"ov-{n}", date, hours, date=date)
            for n, (date, hours) in enumerate(sorted((calendar.date_overrides or {}).items()))
        ]
        return cls(any_time=calendar.working_hours is None, days=days, overrides=overrides)

    @classmethod
    def from_post(cls, data: QueryDict) -> RulesEditor | None:
        """The editor as posted; None when the form had no rules editor in it (rules unchanged)."""
        if "hours" not in data:
            return None
        days = [_posted_day(data, name, DAY_NAMES[name]) for name in WEEKDAYS]
        indexes = sorted(int(m.group(1)) for key in data if (m := _OVERRIDE_DATE_FIELD.fullmatch(key)))
        overrides = []
        for n in indexes:
            row = _posted_day(data, f"ov-{n}", "", date=data.get(f"ov-{n}-date", "").strip())
            row.label = row.date or "this date"
            if row.date or any(i.start or i.end for i in row.intervals if row.open):
                overrides.append(row)
        return cls(any_time=data.get("hours") != "weekly", days=days, overrides=overrides)

    @property
    def has_errors(self) -> bool:
        return bool(self.errors) or any(row.errors for row in (*self.days, *self.overrides))

    def edit(self, action: str) -> None:
        """The add/remove/copy buttons when JavaScript is not there to do it in the page."""
        verb, _, target = action.partition(":")
        rows = {row.key: row for row in (*self.days, *self.overrides)}
        if verb == "add" and target in rows:
            rows[target].open = True
            rows[target].intervals.append(Interval("", ""))
        elif verb == "remove" and target.rpartition(":")[0] in rows:
            key, _, position = target.rpartition(":")
            intervals = rows[key].intervals
            if position.isdigit() and int(position) < len(intervals):
                del intervals[int(position)]
            if not intervals:
                rows[key].open = False
                intervals.append(Interval(*_SPARE_INTERVAL))
        elif verb == "copy-monday":
            monday = self.days[0]
            for day in self.days[1:5]:
                day.open = monday.open
                day.intervals = [Interval(i.start, i.end) for i in monday.intervals]
        elif verb == "add-override":
            n = max((int(row.index) for row in self.overrides), default=-1) + 1
            self.overrides.append(Day(f"ov-{n}", "", open=False, intervals=[Interval(*_SPARE_INTERVAL)]))
        elif verb == "remove-override":
            self.overrides = [row for row in self.overrides if row.key != target]

    def rules_json(self) -> dict[str, Any] | None:
        """`working_hours` and `date_overrides` as the agent API takes them, or None with the problems
        recorded on the rows they are about."""
        for row in (*self.days, *self.overrides):
            row.errors.clear()
            # Sorted by start: order is a matter of JSON, not of a form; incomplete pairs go last so
            # parse_rules' indexes are the rows' positions.
            row.intervals.sort(key=lambda i: (not i.complete, i.start, i.end))
        if not self.any_time:
            for day in self.days:
                day.check_complete()
        seen: set[str] = set()
        for row in self.overrides:
            row.check_complete()
            if not row.date:
                row.errors.append("Pick a date.")
            elif row.date in seen:
                row.errors.append("This date is listed twice.")
            seen.add(row.date)
        working_hours = None if self.any_time else {day.key: day.hours_json() for day in self.days}
        date_overrides = {row.date: row.hours_json() for row in self.overrides if row.date}
        try:
            parse_rules(working_hours=working_hours, date_overrides=date_overrides)
        except InvalidRules as invalid:
            self._place(invalid.errors)
        if self.has_errors:
            return None
        return {"working_hours": working_hours, "date_overrides": date_overrides}

    def _place(self, errors: dict[str, list[str]]) -> None:
        days = {day.key: day for day in self.days}
        dates = {row.date: row for row in self.overrides}
        for path, messages in errors.items():
            match = _ERROR_PATH.fullmatch(path)
            name, key, position = match.groups() if match else ("", None, None)
            row = (days if name == "working_hours" else dates).get(key or "")
            if row is None:
                self.errors.extend(humane(message) for message in messages)
                continue
            if position is not None and int(position) < len(row.intervals):
                row.intervals[int(position)].invalid = True
            row.errors.extend(humane(message) for message in messages)


def humane(message: str) -> str:
    text = _INDEX_REFERENCE.sub(" ", _PAIR.sub(r"\1–\2", message))
    for api_words, form_words in _WORDING:
        text = text.replace(api_words, form_words)
    return text


def _day(key: str, label: str, hours: list[list[str]], *, date: str = "") -> Day:
    intervals = [Interval(start, "00:00" if end == "24:00" else end) for start, end in hours]
    return Day(
        key, label, open=bool(intervals), intervals=intervals or [Interval(*_SPARE_INTERVAL)], date=date
    )


def _posted_day(data: QueryDict, key: str, label: str, *, date: str = "") -> Day:
    starts, ends = data.getlist(f"{key}-start"), data.getlist(f"{key}-end")
    intervals = [
        Interval(_typed_time(start), _typed_time(end))
        for start, end in zip(starts, ends + [""] * (len(starts) - len(ends)), strict=False)
    ]
    is_open = bool(data.get(f"{key}-open"))
    intervals = [i for i in intervals if i.start or i.end]
    if not intervals:  # an open day with no times is an error to show; a closed one keeps its spare
        intervals = [Interval("", "")] if is_open else [Interval(*_SPARE_INTERVAL)]
    return Day(key, label, open=is_open, intervals=intervals, date=date)


def _typed_time(text: str) -> str:
    """A time input's value ("09:00", with seconds if a browser adds them), or text typed where the
    browser has no time input ("9:00"); anything else is passed on as typed, for parse_rules to refuse."""
    text = text.strip()
    match = _TYPED_TIME.fullmatch(text)
    return f"{int(match.group(1)):02d}:{match.group(2)}" if match else text
