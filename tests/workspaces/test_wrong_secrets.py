"""A key's prefix is not secret: wrong secrets under it must cost about what an unknown prefix costs,
not an argon2 verification each (64 MiB and a few hundred milliseconds at the production parameters)."""

from __future__ import annotations

import secrets
import time

import httpx
import pytest
from django.conf import settings as django_settings

from agentcal.metrics import AUTH_UNAUDITED, KEY_VERIFICATIONS_SPARED
from audit.events import AuditEvent
from audit.models import AuditRecord
from tests.helpers import audit_rows, http_client
from workspaces.keys import KEY_PREFIX, LOOKUP_PREFIX_LENGTH, api_key_create

SECRET_LENGTH = 43  # url-safe base64 of 32 bytes


def forged(prefix: str) -> str:
    return f"{KEY_PREFIX}{prefix}{secrets.token_urlsafe(32)}"


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


@pytest.fixture
def production_argon2(settings):
    """The shipped argon2 parameters (the suite lowers them), read from the settings module's defaults."""
    settings.ARGON2_TIME_COST = 3
    settings.ARGON2_MEMORY_COST_KIB = 65536
    settings.ARGON2_PARALLELISM = 4


def timed(anonymous, raws: list[str]) -> tuple[float, list[int]]:
    started = time.perf_counter()
    statuses = [anonymous.get("/calendars", headers=bearer(raw)).status_code for raw in raws]
    return time.perf_counter() - started, statuses


def test_wrong_secrets_on_a_known_prefix_cost_within_three_times_unknown_prefixes(
    production_argon2, sdr, anonymous
):
    key, raw = api_key_create(agent=sdr.agent, scopes=["calendars:read"])
    assert key.key_hash.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert anonymous.get("/calendars", headers=bearer(raw)).status_code == 200  # the real key works

    unknown_time, unknown_statuses = timed(anonymous, [forged("z" * LOOKUP_PREFIX_LENGTH) for _ in range(60)])
    wrong_time, wrong_statuses = timed(anonymous, [forged(key.prefix) for _ in range(60)])

    assert set(unknown_statuses) == {401}
    budget = django_settings.API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP
    assert wrong_statuses[:budget] == [401] * budget
    assert set(wrong_statuses[budget:]) == {429}
    assert wrong_time <= 3 * unknown_time, (wrong_time, unknown_time)
    # The real key is still accepted from memory: another address's failures never lock it out, and
    # its verification is cached.
    assert anonymous.get("/calendars", headers=bearer(raw)).status_code == 200


def test_past_the_budget_the_answer_is_429_with_retry_after_before_argon2(
    sdr, anonymous, settings, live_server
):
    spared = KEY_VERIFICATIONS_SPARED.labels("over_budget")
    before = spared._value.get()
    for _ in range(settings.API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP):
        assert anonymous.get("/calendars", headers=bearer(forged(sdr.key.prefix))).status_code == 401

    response = anonymous.get("/calendars", headers=bearer(forged(sdr.key.prefix)))

    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["error"] == "rate_limited"
    assert problem["limit_name"] == "api_key_wrong_secrets"
    # Two a minute: the next one is back within 30 s.
    assert 1 <= int(response.headers["Retry-After"]) <= 30
    assert problem["retry_after"] == int(response.headers["Retry-After"])
    assert spared._value.get() == before + 1
    # Audited where the key's workspace sees attempts on its own keys, with the prefix.
    refused = audit_rows(event_type=AuditEvent.AUTH_REJECTED, http_status=429)
    assert [(row.auth_key_prefix, row.workspace_id) for row in refused] == [
        (sdr.key.prefix, sdr.agent.workspace_id)
    ]
    # The budget is this address's: the real key, never yet verified in this process, still works from
    # another address (127.0.0.2 is loopback too).
    with http_client(
        f"{live_server.url}/v1", transport=httpx.HTTPTransport(local_address="127.0.0.2")
    ) as elsewhere:
        assert elsewhere.get("/calendars", headers=bearer(sdr.raw_key)).status_code == 200
    # Once verified it is known by its HMAC, from any address, without argon2 or budget.
    assert anonymous.get("/calendars", headers=bearer(sdr.raw_key)).status_code == 200


def test_a_secret_refused_before_is_refused_again_without_argon2_or_budget(sdr, anonymous, settings):
    settings.API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP = 1
    spared = KEY_VERIFICATIONS_SPARED.labels("refused_before")
    before = spared._value.get()
    same = forged(sdr.key.prefix)

    statuses = [anonymous.get("/calendars", headers=bearer(same)).status_code for _ in range(5)]

    assert statuses == [401] * 5  # the same wrong secret never reaches the budget: it is known wrong
    assert spared._value.get() == before + 4


def test_the_budget_is_per_address_and_prefix_not_per_key(sdr, make_agent, anonymous, settings):
    """Failures on one prefix leave another key's budget untouched (up to the per-address total)."""
    other = make_agent("other")
    budget = settings.API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP
    for _ in range(budget + 1):
        anonymous.get("/calendars", headers=bearer(forged(sdr.key.prefix)))
    assert anonymous.get("/calendars", headers=bearer(forged(sdr.key.prefix))).status_code == 429
    assert anonymous.get("/calendars", headers=bearer(forged(other.key.prefix))).status_code == 401


def test_refusals_without_a_key_are_audited_within_the_peers_budget_then_counted(anonymous, settings):
    settings.API_AUDITED_AUTH_REFUSALS_PER_MINUTE_PER_IP = 5
    counted = AUTH_UNAUDITED.labels("unauthenticated")
    before = counted._value.get()
    rows_before = AuditRecord.objects.filter(event_type=AuditEvent.AUTH_REJECTED).count()

    statuses = [anonymous.get("/calendars", headers=bearer(forged("q" * 10))).status_code for _ in range(40)]

    assert set(statuses) == {401}  # the answer never changes: only whether it leaves a row
    assert AuditRecord.objects.filter(event_type=AuditEvent.AUTH_REJECTED).count() == rows_before + 5
    assert counted._value.get() == before + 35
