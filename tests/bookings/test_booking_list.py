"""GET /calendars/{cal}/bookings: committed bookings, cursor-paginated, filtered by time."""

from __future__ import annotations

from tests.bookings.helpers import commit, commit_hold, created, hold, problem
from tests.helpers import slot


def _list(persona, calendar_id, **params):
    response = persona.client.get(f"/calendars/{calendar_id}/bookings", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def _book_hours(persona, calendar_id, hours):
    return [
        created(commit(persona, calendar_id, slot(minutes=30, offset_minutes=60 * h)))["id"] for h in hours
    ]


def test_it_lists_committed_bookings_only(sdr, calendar):
    booked = _book_hours(sdr, calendar["id"], [0, 1])
    from_hold = created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=120)))
    promoted = created(commit_hold(sdr, calendar["id"], from_hold["hold_token"]))
    created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=180)))  # a hold is not a booking
    cancelled = created(commit(sdr, calendar["id"], slot(minutes=30, offset_minutes=240)))
    assert sdr.client.delete(f"/bookings/{cancelled['id']}").status_code == 200

    body = _list(sdr, calendar["id"])

    assert [b["id"] for b in body["results"]] == [*booked, promoted["id"]]
    assert all(b["status"] == "committed" for b in body["results"])
    assert body["next_cursor"] is None


def test_it_pages_with_a_cursor_without_duplicates(sdr, calendar):
    booked = _book_hours(sdr, calendar["id"], range(5))

    pages = [_list(sdr, calendar["id"], limit=2)]
    while pages[-1]["next_cursor"]:
        pages.append(_list(sdr, calendar["id"], limit=2, cursor=pages[-1]["next_cursor"]))

    assert [len(p["results"]) for p in pages] == [2, 2, 1]
    seen = [b["id"] for p in pages for b in p["results"]]
    assert seen == booked
    assert len(set(seen)) == len(seen)


def test_it_filters_by_start_and_end(sdr, calendar):
    booked = _book_hours(sdr, calendar["id"], range(4))  # [h:00, h:30) for h = 0..3
    window = slot(minutes=120, offset_minutes=60)  # [1:00, 3:00)

    body = _list(sdr, calendar["id"], start=window["start_time"], end=window["end_time"])

    assert [b["id"] for b in body["results"]] == booked[1:3]
    # Half-open: a booking that ends exactly at `start` is not in the window.
    edge = slot(minutes=60, offset_minutes=30)  # [0:30, 1:30)
    assert [b["id"] for b in _list(sdr, calendar["id"], start=edge["start_time"])["results"]] == booked[1:]
    assert [b["id"] for b in _list(sdr, calendar["id"], end=edge["end_time"])["results"]] == booked[:2]


def test_a_cursor_from_one_filter_is_refused_for_another(sdr, calendar):
    _book_hours(sdr, calendar["id"], range(3))
    first = _list(sdr, calendar["id"], limit=1)
    window = slot(minutes=600)

    response = sdr.client.get(
        f"/calendars/{calendar['id']}/bookings",
        params={"limit": 1, "cursor": first["next_cursor"], "start": window["start_time"]},
    )

    problem(response, 400, "invalid_request")
