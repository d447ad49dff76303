"""The pages the dashboard refuses with: a role short of a page's permission, a page's own refusal, and a
form whose CSRF check failed. Each is the dashboard's card with a way back, never Django's bare default."""

from __future__ import annotations

from accounts.models import Membership
from tests.dashboard.pages_helpers import signed_in


def text(response) -> str:
    return response.content.decode()


def test_a_role_short_of_the_page_is_told_what_it_cannot_do_and_which_owner_can_change_that(team):
    response = signed_in(team.member).get("/w/acme/inboxes")

    assert response.status_code == 403
    html = text(response)
    assert 'class="auth-card"' in html
    assert "You are an approver in Acme: an approver cannot read agents&#x27; inboxes." in html
    assert 'href="mailto:olivia@acme.test"' in html and "adam@acme.test" not in html  # owners grant roles
    assert 'href="/w/acme/approvals" data-testid="forbidden-back">Back to Acme</a>' in html


def test_a_pages_own_refusal_says_its_reason_and_leads_back_to_the_workspace(team):
    owner_membership = Membership.objects.get(user=team.owner, workspace__slug="acme")

    response = signed_in(team.member).post(f"/w/acme/team/members/{owner_membership.pk}/remove")

    assert response.status_code == 403
    html = text(response)
    assert "Only owners invite people, change roles and remove members." in html
    assert "Back to Acme" in html and 'class="auth-card"' in html


def test_a_refused_form_leads_back_to_the_dashboard_page_it_came_from(team, settings):
    settings.DASHBOARD_BASE_URL = "http://testserver"
    client = signed_in(team.owner, enforce_csrf_checks=True)

    response = client.post("/auth/sign-out", HTTP_REFERER="http://testserver/w/acme/audit?page=2")

    assert response.status_code == 403
    html = text(response)
    assert 'data-testid="csrf-failure"' in html and "Nothing was changed" in html
    assert 'href="/w/acme/audit?page=2" data-testid="csrf-back"' in html
    assert client.get("/w/acme/audit").status_code == 200  # still signed in


def test_a_refused_form_from_another_site_leads_to_the_dashboard_home_not_back_there(team, settings):
    settings.DASHBOARD_BASE_URL = "http://testserver"
    client = signed_in(team.owner, enforce_csrf_checks=True)

    response = client.post("/auth/sign-out", HTTP_REFERER="https://evil.example/phish")

    assert response.status_code == 403
    assert 'href="/" data-testid="csrf-back"' in text(response)
    assert "evil.example" not in text(response)
