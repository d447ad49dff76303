"""Moments of people's and agents' actions read in the viewer's own zone, named, with UTC on hover: one
tag (`{% moment %}`) renders them; the browser tells the zone once (a CSRF-checked POST) and it is kept on
the person's profile."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.template import Context, Template, TemplateSyntaxError
from django.test import RequestFactory

from accounts.models import Profile
from agentcal.moments import moment_text, utc_text, zone_label
from approvals.services import approval_request
from tests.dashboard.pages_helpers import Team, actor, signed_in

MOMENT = datetime(2026, 12, 2, 0, 8, 43, 250797, tzinfo=UTC)


def render(source: str, **context: object) -> str:
    return Template("{% load dashboard_tags %}" + source).render(Context(context))


def test_the_tag_renders_a_time_in_the_viewers_zone_with_its_name_and_utc_on_hover() -> None:
    html = render("{% moment at %}", at=MOMENT, viewer_zone=ZoneInfo("Asia/Kolkata"))
    assert html == (
        '<time datetime="2026-12-02T00:08:43.250797Z" title="2026-12-02 00:08:43 UTC" data-moment>'
        "Wed 2 Dec 2026, 05:38 IST</time>"
    )


def test_an_unknown_zone_reads_as_utc_labelled_utc() -> None:
    assert ">Wed 2 Dec 2026, 00:08 UTC</time>" in render("{% moment at %}", at=MOMENT)


def test_the_tag_reads_the_zone_from_the_request() -> None:
    request = RequestFactory().get("/")
    request.viewer_zone = ZoneInfo("America/New_York")  # type: ignore[attr-defined]
    html = render('{% moment at "seconds" %}', at=MOMENT, request=request)
    assert ">1 Dec 2026, 19:08:43 EST</time>" in html


@pytest.mark.parametrize(
    ("style", "zone", "text"),
    [
        ("datetime", "Europe/Berlin", "Wed 2 Dec 2026, 01:08 CET"),
        ("seconds", "Asia/Kolkata", "2 Dec 2026, 05:38:43 IST"),
        ("short", "America/Los_Angeles", "1 Dec, 16:08 PST"),
        ("date", "Pacific/Auckland", "2 Dec 2026 (NZDT)"),
        ("datetime", "Asia/Dubai", "Wed 2 Dec 2026, 04:08 UTC+04"),  # a zone with no abbreviation
    ],
)
def test_each_style_names_the_zone(style: str, zone: str, text: str) -> None:
    assert moment_text(MOMENT, ZoneInfo(zone), style) == text


def test_summer_time_changes_the_label() -> None:
    july = datetime(2026, 7, 1, 12, tzinfo=UTC)
    assert zone_label(july.astimezone(ZoneInfo("Europe/Berlin"))) == "CEST"
    assert moment_text(july, ZoneInfo("Europe/Berlin"), "short") == "1 Jul, 14:00 CEST"


def test_age_style_hovers_the_local_and_the_utc_time() -> None:
    ten_minutes_ago = datetime.now(UTC) - timedelta(minutes=10)
    html = render('{% moment at "age" %}', at=ten_minutes_ago, viewer_zone=ZoneInfo("Asia/Kolkata"))
    assert ">10m ago</time>" in html
    assert re.search(r'title="\w{3} \d+ \w{3} \d{4}, \d\d:\d\d IST · [-\d]+ [:\d]+ UTC"', html)


def test_a_missing_moment_renders_nothing_and_a_wrong_style_is_refused() -> None:
    assert render("{% moment at %}", at=None) == ""
    with pytest.raises(TemplateSyntaxError):
        render('{% moment at "weekday" %}', at=MOMENT)


def test_the_browser_zone_is_stored_and_pages_then_render_in_it(team: Team) -> None:
    client = signed_in(team.owner)
    approval_request(actor=actor(team.sdr), summary="Send the proposal", evidence={})
    before = client.get("/w/acme/approvals").content.decode()
    assert 'data-viewer-zone=""' in before and " UTC · " in before  # not known yet: UTC, named

    response = client.post("/auth/time-zone", {"time_zone": "Asia/Kolkata"}, content_type="application/json")

    assert response.status_code == 204
    assert Profile.objects.get(user=team.owner).time_zone == "Asia/Kolkata"
    after = client.get("/w/acme/approvals").content.decode()
    assert 'data-viewer-zone="Asia/Kolkata"' in after and " IST · " in after
    # Another browser of the same person (a new session) reads it from the profile.
    assert 'data-viewer-zone="Asia/Kolkata"' in signed_in(team.owner).get("/auth/passkeys").content.decode()


def test_an_unknown_zone_is_refused_and_nothing_changes(team: Team) -> None:
    client = signed_in(team.owner)
    for name in ("Berlin", "../../etc/passwd", 42, ""):
        response = client.post("/auth/time-zone", {"time_zone": name}, content_type="application/json")
        assert response.status_code == 400
    assert not Profile.objects.filter(user=team.owner).exists()


def test_storing_the_zone_needs_the_csrf_token_and_a_person(team: Team) -> None:
    strict = signed_in(team.owner, enforce_csrf_checks=True)
    body = {"time_zone": "Asia/Kolkata"}
    assert strict.post("/auth/time-zone", body, content_type="application/json").status_code == 403
    anonymous = signed_in(team.owner)
    anonymous.logout()
    assert anonymous.post("/auth/time-zone", body, content_type="application/json").status_code == 302
    assert not Profile.objects.filter(user=team.owner).exists()


def test_the_audit_trail_and_passkeys_render_in_the_stored_zone(team: Team) -> None:
    from accounts.models import Passkey

    Profile.objects.create(user=team.owner, time_zone="Asia/Kolkata")
    Passkey.objects.create(user=team.owner, name="Laptop", credential_id=b"k", public_key=b"-")
    approval_request(actor=actor(team.sdr), summary="Send the proposal", evidence={})
    client = signed_in(team.owner)

    audit = client.get("/w/acme/audit").content.decode()
    (row_time,) = re.findall(r'<td class="mono nowrap audit-time">.*?</td>', audit, re.S)[:1]
    assert re.search(r'title="[-\d]+ [:\d]+ UTC" data-moment>\d+ \w{3} \d{4}, [:\d]{8} IST</time>', row_time)

    passkeys = client.get("/auth/passkeys").content.decode()
    added = r'data-testid="passkey-added"><time [^>]+ UTC" data-moment>\d+ \w{3}, [:\d]{5} IST'
    assert re.search(added, passkeys)


def test_the_utc_hover_is_exact(team: Team) -> None:
    assert utc_text(MOMENT.astimezone(ZoneInfo("Asia/Kolkata"))) == "2026-12-02 00:08:43 UTC"
