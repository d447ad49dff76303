"""Agents & keys: read-only for members; owners and admins create agents, issue, revoke and rotate keys
and set priorities, each change audited with the person's email. Raw keys are shown once, kept nowhere."""

from __future__ import annotations

import re
from datetime import time, timedelta

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from agentcal.errors import SlotConflict
from agentcal.sealing import seal_secret
from audit.models import AuditRecord
from bookings.engine import hold_commit, hold_create
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    make_team,
    signed_in,
    span_on,
    tables_containing,
    text,
)
from webhooks.models import DeliveryAttempt, OutboxEvent, WebhookDelivery, WebhookEndpoint
from workspaces.keys import KEY_PREFIX, LOOKUP_PREFIX_LENGTH, api_key_create, verified_keys
from workspaces.models import Agent, ApiKey

AGENTS = "/w/acme/agents"
RAW_KEY = re.compile(r'<code id="new-raw-key">(avs_live_[A-Za-z0-9_-]+)</code>')


@pytest.fixture
def team(db, django_user_model):
    yield make_team(django_user_model)
    verified_keys.clear()


def detail(agent: Agent) -> str:
    return f"{AGENTS}/{agent.public_id}"


def api_status(raw_key: str) -> int:
    """What the real API answers to this key (the dashboard and the API share one process here)."""
    return Client().get("/v1/calendars", HTTP_AUTHORIZATION=f"Bearer {raw_key}").status_code


def admin_rows(event_type: str) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(event_type=event_type).order_by("id"))


def secret_part(raw: str) -> str:
    return raw[len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH :]


# --- Reading -----------------------------------------------------------------------------------------------


def test_members_see_agents_with_priorities_keys_and_booking_stats(team):
    calendar = make_calendar(team.workspace)
    day, sdr, boss = future_day(3), actor(team.sdr), actor(team.exec_assistant)
    first = hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(9)), ttl_seconds=600)
    assert first.hold_token is not None
    hold_commit(actor=sdr, calendar=calendar, hold_token=first.hold_token)
    hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(10)), ttl_seconds=600)
    hold_create(actor=boss, calendar=calendar, span=span_on(day, time(11)), ttl_seconds=600)
    with pytest.raises(SlotConflict):
        hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(11)))  # loses: conflict
    api_key_create(agent=team.sdr, scopes=["calendars:read"])
    revoked, _ = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    ApiKey.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())

    response = signed_in(team.member).get(AGENTS)

    assert response.status_code == 200
    html = text(response)
    sdr_row = row_for(html, team.sdr)
    assert "SDR bot" in sdr_row and "<strong>100</strong>" in sdr_row and "max 200" in sdr_row
    assert cell(sdr_row, "key-count").startswith('1<span class="hint"> active of 2')
    assert (cell(sdr_row, "holds"), cell(sdr_row, "commits")) == ("2", "1")
    assert cell(sdr_row, "conflicts") == '<span class="error">1</span>'
    assert cell(sdr_row, "conversion") == "50%"
    boss_row = row_for(html, team.exec_assistant)
    assert (cell(boss_row, "holds"), cell(boss_row, "conflicts"), cell(boss_row, "conversion")) == (
        "1",
        "0",
        "0%",
    )
    assert "Rival" not in html  # another workspace's agent
    # Members read; they get no forms.
    assert (
        'data-testid="agent-create"' not in html and '<form method="post" action="/w/acme/agents"' not in html
    )


def row_for(html: str, agent: Agent) -> str:
    start = html.index(f'data-agent="{agent.public_id}"')
    return html[start : html.index("</tr>", start)]


def cell(row: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}">(.*?)</td>', row, re.S)
    assert match, testid
    return match.group(1).strip()


def test_the_detail_page_shows_keys_with_status_and_webhook_attempts(team):
    active, _ = api_key_create(agent=team.sdr, scopes=["calendars:read", "bookings:write"], name="worker")
    revoked, _ = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    expiring, _ = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    ApiKey.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    ApiKey.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    endpoint = WebhookEndpoint.objects.create(
        agent=team.sdr,
        url="https://hooks.example.test/agentcal",
        events=["hold.*"],
        sealed_secret=seal_secret("whsec_x"),
    )
    event = OutboxEvent.objects.create(
        workspace=team.workspace, agent=team.sdr, event_type="hold.created", payload={}
    )
    delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint)
    for n in range(12):
        DeliveryAttempt.objects.create(
            delivery=delivery,
            status_code=None if n == 11 else 500 + n,
            latency_ms=100 + n,
            error="connect timeout <b>x</b>" if n == 11 else "",
        )

    response = signed_in(team.member).get(detail(team.sdr))

    assert response.status_code == 200
    html = text(response)
    statuses = dict(re.findall(r'data-testid="key-row" data-prefix="(\w+)" data-status="(\w+)"', html))
    assert statuses == {active.prefix: "active", revoked.prefix: "revoked", expiring.prefix: "expiring"}
    assert "bookings:write" in html and "worker" in html and "never" in html
    assert "https://hooks.example.test/agentcal" in html
    assert html.count('data-testid="attempt-row"') == 10
    assert "111 ms" in html and "100 ms" not in html and "101 ms" not in html  # the 10 most recent
    assert "connect timeout &lt;b&gt;x&lt;/b&gt;" in html and ">510<" in html
    # Members see no forms or actions.
    assert "<form" not in html.split('<main class="main"')[1]


def test_empty_states(team):
    Agent.objects.filter(workspace=team.workspace).delete()
    member = signed_in(team.member)
    assert "No agents yet" in text(member.get(AGENTS))
    agent = Agent.objects.create(workspace=team.workspace, name="Fresh", slug="fresh")
    html = text(member.get(detail(agent)))
    assert "No keys yet" in html and "No webhook endpoints" in html


def test_untrusted_names_are_escaped(team):
    Agent.objects.create(workspace=team.workspace, name="<script>alert(1)</script>", slug="evil")
    html = text(signed_in(team.member).get(AGENTS))
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --- Creating and editing agents ---------------------------------------------------------------------------


def test_an_admin_creates_an_agent_with_a_derived_slug_and_it_is_audited(team):
    admin = signed_in(team.admin)
    form = text(admin.get(AGENTS))
    assert 'data-testid="agent-create"' in form and "csrfmiddlewaretoken" in form

    response = admin.post(AGENTS, {"name": "SDR bot", "priority": "150", "max_priority": "300"})

    agent = Agent.objects.get(workspace=team.workspace, name="SDR bot", priority=150)
    assert agent.slug == "sdr-bot" and agent.max_priority == 300  # "sdr" is taken by no one; derived
    assert response.status_code == 302 and response["Location"] == detail(agent)
    (row,) = admin_rows("agent.created")
    assert row.actor_user == "adam@acme.test" and row.workspace_id == team.workspace.pk
    assert row.details["agent_id"] == agent.public_id and row.details["priority"] == 150


def test_a_derived_slug_that_is_taken_gets_a_suffix_but_an_explicit_one_is_refused(team):
    owner = signed_in(team.owner)
    owner.post(AGENTS, {"name": "SDR", "priority": "100"})
    assert Agent.objects.filter(workspace=team.workspace, slug="sdr-2", max_priority=100).exists()

    response = owner.post(AGENTS, {"name": "Other", "slug": "sdr", "priority": "100"})

    assert response.status_code == 400
    assert "Another agent in this workspace already has this slug." in text(response)
    assert not Agent.objects.filter(name="Other").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "", "priority": "100"}, "This field is required."),
        ({"name": "X", "priority": "500", "max_priority": "100"}, "Must be at least the default priority."),
        ({"name": "X", "priority": "5000"}, "Ensure this value is less than or equal to 1000."),
        ({"name": "X", "priority": "high"}, "Enter a whole number."),
        ({"name": "X", "slug": "not a slug", "priority": "1"}, "Enter a valid “slug”"),
    ],
)
def test_invalid_agent_input_is_shown_inline_and_nothing_is_created(team, data, message):
    before = Agent.objects.count()
    response = signed_in(team.owner).post(AGENTS, data)
    assert response.status_code == 400
    html = text(response)
    assert message in html and 'class="error field-error"' in html and 'aria-invalid="true"' in html
    assert Agent.objects.count() == before and not AuditRecord.objects.exists()


def test_an_owner_edits_priorities_and_the_change_is_audited(team):
    owner = signed_in(team.owner)
    response = owner.post(f"{detail(team.sdr)}/priority", {"priority": "300", "max_priority": "600"})
    assert response.status_code == 302
    team.sdr.refresh_from_db()
    assert (team.sdr.priority, team.sdr.max_priority) == (300, 600)
    (row,) = admin_rows("agent.updated")
    assert row.actor_user == "olivia@acme.test"
    assert row.details == {
        "agent_id": team.sdr.public_id,
        "changes": {"priority": [100, 300], "max_priority": [200, 600]},
    }
    assert "Priority set to 300 (max 600)." in text(owner.get(detail(team.sdr)))


def test_invalid_priorities_are_refused_inline(team):
    response = signed_in(team.owner).post(
        f"{detail(team.sdr)}/priority", {"priority": "300", "max_priority": "200"}
    )
    assert response.status_code == 400 and "Must be at least the default priority." in text(response)
    team.sdr.refresh_from_db()
    assert (team.sdr.priority, team.sdr.max_priority) == (100, 200)


def test_an_admin_renames_an_agent_its_slug_stays_and_the_change_is_audited(team):
    admin = signed_in(team.admin)
    response = admin.post(f"{detail(team.sdr)}/name", {"name": "  Outbound SDR  "})

    assert response.status_code == 302 and response["Location"] == detail(team.sdr)
    team.sdr.refresh_from_db()
    assert (team.sdr.name, team.sdr.slug) == ("Outbound SDR", "sdr")
    (row,) = admin_rows("agent.updated")
    assert row.actor_user == "adam@acme.test"
    assert row.details == {"agent_id": team.sdr.public_id, "changes": {"name": ["SDR bot", "Outbound SDR"]}}
    assert "Renamed SDR bot to Outbound SDR" in text(admin.get(detail(team.sdr)))
    # The same name again changes nothing and writes no row; a blank name is refused inline.
    admin.post(f"{detail(team.sdr)}/name", {"name": "Outbound SDR"})
    blank = admin.post(f"{detail(team.sdr)}/name", {"name": "   "})
    assert blank.status_code == 400 and 'id="r-name-error">This field is required.' in text(blank)
    assert len(admin_rows("agent.updated")) == 1


def test_disabling_an_agent_shows_it_everywhere_and_enabling_restores_it(team):
    owner = signed_in(team.owner)
    assert owner.post(f"{detail(team.sdr)}/disable").status_code == 302

    team.sdr.refresh_from_db()
    assert team.sdr.is_active is False
    page = text(owner.get(detail(team.sdr)))
    assert 'data-testid="agent-disabled"' in page and 'data-testid="enable-form"' in page
    assert 'data-testid="disable-form"' not in page
    assert '<span class="pill disabled">disabled</span>' in text(owner.get(AGENTS))
    again = owner.post(f"{detail(team.sdr)}/disable", follow=True)
    assert "already disabled" in text(again)
    (row,) = admin_rows("agent.disabled")
    assert row.actor_user == "olivia@acme.test"
    assert row.details == {"agent_id": team.sdr.public_id, "name": "SDR bot"}

    assert owner.post(f"{detail(team.sdr)}/enable").status_code == 302
    team.sdr.refresh_from_db()
    assert team.sdr.is_active is True and len(admin_rows("agent.enabled")) == 1
    assert 'data-testid="agent-disabled"' not in text(owner.get(detail(team.sdr)))


def test_members_see_the_agents_status_but_no_controls(team):
    team.sdr.is_active = False
    team.sdr.save(update_fields=["is_active"])
    page = text(signed_in(team.member).get(detail(team.sdr)))
    assert 'data-testid="agent-disabled"' in page
    for control in ("enable-form", "disable-form", "rename-form"):
        assert f'data-testid="{control}"' not in page


# --- Keys ------------------------------------------------------------------------------------------------


def key_count() -> int:
    return ApiKey.objects.count()


def post_for_key(client: Client, path: str, data: dict) -> tuple[str, str]:
    """POST that makes a key; follow its 303 to the key's page; return that page's URL and the raw key."""
    posted = client.post(path, data)
    assert posted.status_code == 303, text(posted)
    location = posted["Location"]
    assert re.fullmatch(r"/w/acme/agents/agt_\w+/keys/[a-z0-9]{10}/new", location), location
    page = client.get(location)
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    html = text(page)
    (raw,) = RAW_KEY.findall(html)
    assert secret_part(raw) not in location  # never in a URL: only the non-secret prefix is
    assert html.count(raw) == 1 and html.count(secret_part(raw)) == 1
    return location, raw


def test_a_new_key_is_shown_exactly_once_and_stored_nowhere(team):
    owner = signed_in(team.owner)
    new_key_page, raw = post_for_key(
        owner, f"{detail(team.sdr)}/keys", {"name": "worker", "scopes": ["calendars:read", "audit:read"]}
    )

    html = text(owner.get(new_key_page))  # the reload
    assert "already shown" in html and 'data-testid="key-already-shown"' in html
    assert secret_part(raw) not in html and key_count() == 1  # a reload mints nothing
    key = ApiKey.objects.get(prefix=raw[len(KEY_PREFIX) : len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH])
    assert key.agent == team.sdr and key.scopes == ["audit:read", "calendars:read"] and key.name == "worker"
    assert api_status(raw) == 200
    # Never again: not on the agent's page, not in any table (the session included), not in the audit row.
    assert secret_part(raw) not in text(owner.get(detail(team.sdr)))
    assert tables_containing(raw) == [] and tables_containing(secret_part(raw)) == []
    assert "workspaces_apikey" in tables_containing(key.prefix)  # the scan itself works
    assert "one_time_secrets" not in owner.session  # cleared once shown
    (row,) = admin_rows("api_key.created")
    assert row.actor_user == "olivia@acme.test"
    assert row.details == {
        "agent_id": team.sdr.public_id,
        "key_prefix": key.prefix,
        "scopes": ["audit:read", "calendars:read"],
        "name": "worker",
    }


def test_between_the_post_and_its_page_the_session_holds_the_key_only_sealed(team):
    owner = signed_in(team.owner)
    posted = owner.post(f"{detail(team.sdr)}/keys", {"scopes": ["calendars:read"]})
    # Every session as stored, and as Django decodes it, while the key waits for its page.
    sessions = [(row.session_data, str(row.get_decoded())) for row in Session.objects.all()]
    assert any("one_time_secrets" in decoded for _, decoded in sessions)
    assert owner.head(posted["Location"]).status_code == 200  # a HEAD leaves the key waiting

    raw = RAW_KEY.findall(text(owner.get(posted["Location"])))[0]

    for stored, decoded in sessions:
        assert secret_part(raw) not in stored and secret_part(raw) not in decoded


def test_the_key_page_shows_nothing_to_anyone_else_and_the_forms_url_leads_back(team):
    owner = signed_in(team.owner)
    posted = owner.post(f"{detail(team.sdr)}/keys", {"scopes": ["calendars:read"]})
    for person in (team.admin, team.member):
        page = signed_in(person).get(posted["Location"])
        assert page.status_code == 200 and RAW_KEY.findall(text(page)) == []
        assert "cannot be shown" in text(page)
    assert signed_in(team.outsider).get(posted["Location"]).status_code == 404
    # The URL the form posts to, opened later (or reloaded after an error), is not a blank 405.
    opened = owner.get(f"{detail(team.sdr)}/keys")
    assert opened.status_code == 302 and opened["Location"] == f"{detail(team.sdr)}#key-create"
    key = ApiKey.objects.get()
    rotate_url = owner.get(f"{detail(team.sdr)}/keys/{key.prefix}/rotate")
    assert rotate_url.status_code == 302 and rotate_url["Location"] == f"{detail(team.sdr)}#api-keys"
    assert key_count() == 1
    # The owner's own page still shows the key, once.
    assert len(RAW_KEY.findall(text(owner.get(posted["Location"])))) == 1


def test_two_keys_made_before_either_page_is_opened_are_both_shown(team):
    owner = signed_in(team.owner)
    first = owner.post(f"{detail(team.sdr)}/keys", {"scopes": ["calendars:read"]})["Location"]
    second = owner.post(f"{detail(team.exec_assistant)}/keys", {"scopes": ["audit:read"]})["Location"]
    assert len(RAW_KEY.findall(text(owner.get(second)))) == 1
    assert len(RAW_KEY.findall(text(owner.get(first)))) == 1


def test_a_key_needs_a_scope(team):
    response = signed_in(team.owner).post(f"{detail(team.sdr)}/keys", {"name": "x"})
    assert response.status_code == 400
    assert 'data-testid="scope-error">Choose at least one scope.' in text(response)
    assert not ApiKey.objects.exists()


def test_revoking_a_key_refuses_it_at_once(team):
    key, raw = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    assert api_status(raw) == 200  # verified and cached in this process

    response = signed_in(team.admin).post(f"{detail(team.sdr)}/keys/{key.prefix}/revoke")

    assert response.status_code == 302
    assert api_status(raw) == 401
    key.refresh_from_db()
    assert key.revoked_at is not None
    (row,) = admin_rows("api_key.revoked")
    assert row.actor_user == "adam@acme.test" and row.details["key_prefix"] == key.prefix
    again = signed_in(team.admin).post(f"{detail(team.sdr)}/keys/{key.prefix}/revoke", follow=True)
    assert "already revoked" in text(again) and len(admin_rows("api_key.revoked")) == 1


def test_rotating_a_key_gives_a_new_one_and_the_old_one_works_until_its_grace_ends(team):
    old, old_raw = api_key_create(agent=team.sdr, scopes=["calendars:read", "bookings:write"], name="worker")
    owner = signed_in(team.owner)
    before = timezone.now()

    page, new_raw = post_for_key(owner, f"{detail(team.sdr)}/keys/{old.prefix}/rotate", {"grace": "1h"})

    html = text(owner.get(page))
    assert "already shown" in html and key_count() == 2  # the reload rotates nothing
    new = ApiKey.objects.exclude(pk=old.pk).get(agent=team.sdr)
    assert new_raw.startswith(KEY_PREFIX + new.prefix)
    assert new.scopes == ["bookings:write", "calendars:read"] and new.expires_at is None
    old.refresh_from_db()
    assert old.expires_at is not None
    assert before + timedelta(minutes=59) < old.expires_at < timezone.now() + timedelta(minutes=61)
    assert api_status(old_raw) == 200 and api_status(new_raw) == 200
    assert tables_containing(secret_part(new_raw)) == []

    ApiKey.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    verified_keys.clear()  # a queryset update: this process's copy of the key row is dropped by hand
    assert api_status(old_raw) == 401 and api_status(new_raw) == 200

    (row,) = admin_rows("api_key.rotated")
    assert row.actor_user == "olivia@acme.test"
    assert (row.details["key_prefix"], row.details["new_key_prefix"]) == (old.prefix, new.prefix)
    assert row.details["grace_seconds"] == 3600
    # An old key in its grace period cannot be rotated again (that would mint a second successor).
    again = owner.post(f"{detail(team.sdr)}/keys/{old.prefix}/rotate", {"grace": "7d"}, follow=True)
    assert "already rotated" in text(again) and ApiKey.objects.filter(agent=team.sdr).count() == 2


def test_the_rotated_keys_page_says_how_long_the_old_one_keeps_working(team):
    old, _ = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    owner = signed_in(team.owner)
    posted = owner.post(f"{detail(team.sdr)}/keys/{old.prefix}/rotate", {"grace": "1h"})
    html = text(owner.get(posted["Location"]))
    assert "Key rotated" in html and "keeps working for 1 hour" in html and old.prefix in html


def test_a_grace_period_outside_the_menu_is_refused(team):
    old, _ = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    response = signed_in(team.owner).post(f"{detail(team.sdr)}/keys/{old.prefix}/rotate", {"grace": "30d"})
    assert response.status_code == 302
    old.refresh_from_db()
    assert old.expires_at is None and ApiKey.objects.count() == 1


# --- Who may do what -------------------------------------------------------------------------------------


def admin_key(team) -> ApiKey:
    """A key for the admin actions to act on; and a disabled agent, so that enabling it would change it."""
    Agent.objects.filter(pk=team.exec_assistant.pk).update(is_active=False)
    key, _ = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    return key


def admin_actions(team, key: ApiKey) -> list[tuple[str, dict]]:
    base = detail(team.sdr)
    return [
        (AGENTS, {"name": "Sneaky", "priority": "100"}),
        (f"{base}/priority", {"priority": "900", "max_priority": "900"}),
        (f"{base}/name", {"name": "Renamed"}),
        (f"{base}/disable", {}),
        (f"{detail(team.exec_assistant)}/enable", {}),
        (f"{base}/keys", {"scopes": ["calendars:read"]}),
        (f"{base}/keys/{key.prefix}/revoke", {}),
        (f"{base}/keys/{key.prefix}/rotate", {"grace": "1h"}),
    ]


def snapshot() -> tuple:
    return (
        list(Agent.objects.order_by("id").values_list("name", "priority", "max_priority", "is_active")),
        list(ApiKey.objects.order_by("id").values_list("prefix", "revoked_at", "expires_at")),
        AuditRecord.objects.count(),
    )


def test_a_member_posting_admin_actions_gets_403_and_nothing_changes(team):
    key = admin_key(team)
    member = signed_in(team.member)
    before = snapshot()
    for path, data in admin_actions(team, key):
        assert member.post(path, data).status_code == 403, path
    assert snapshot() == before


def test_another_workspaces_people_get_404_for_every_page_and_action(team):
    key = admin_key(team)
    outsider = signed_in(team.outsider)
    before = snapshot()
    assert outsider.get(AGENTS).status_code == 404
    assert outsider.get(detail(team.sdr)).status_code == 404
    for path, data in admin_actions(team, key):
        assert outsider.post(path, data).status_code == 404, path
    # Nor can an owner of acme reach globex's agent through acme's URLs.
    owner = signed_in(team.owner)
    assert owner.get(detail(team.rival)).status_code == 404
    rival_key, _ = api_key_create(agent=team.rival, scopes=["calendars:read"])
    assert owner.post(f"{detail(team.rival)}/keys/{rival_key.prefix}/revoke").status_code == 404
    assert owner.post(f"{detail(team.sdr)}/keys/{rival_key.prefix}/revoke").status_code == 404
    assert snapshot()[0] == before[0] and snapshot()[2] == before[2]


def test_anonymous_is_sent_to_sign_in(team, client):
    key = admin_key(team)
    for path in (AGENTS, detail(team.sdr)):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/auth/sign-in")
    for path, data in admin_actions(team, key):
        response = client.post(path, data)
        assert response.status_code == 302 and response["Location"].startswith("/auth/sign-in"), path


def test_posts_without_a_csrf_token_are_refused(team):
    key = admin_key(team)
    owner = signed_in(team.owner, enforce_csrf_checks=True)
    before = snapshot()
    for path, data in admin_actions(team, key):
        assert owner.post(path, data).status_code == 403, path
    assert snapshot() == before
    # With the token from the page, the same client succeeds.
    page = text(owner.get(AGENTS))
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match is not None
    token = match.group(1)
    response = owner.post(AGENTS, {"name": "Legit", "priority": "100", "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and Agent.objects.filter(name="Legit").exists()
