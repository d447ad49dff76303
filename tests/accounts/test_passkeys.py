"""Passkey registration and sign-in through the real endpoints, with a software authenticator."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from django.contrib.sessions.models import Session
from django.test import Client

from accounts.models import Passkey, Profile
from tests.accounts.authenticator import SoftAuthenticator
from tests.accounts.helpers import ORIGIN, make_person

if TYPE_CHECKING:
    # What the test client returns: a response with .json(); the stubs' name for it.
    from django.test.client import _MonkeyPatchedWSGIResponse as TestResponse


def register(
    client: Client, authenticator: SoftAuthenticator, name: str = "Laptop", **kwargs
) -> TestResponse:
    options = client.post("/auth/passkeys/register/options").json()
    credential = authenticator.create(options, **kwargs)
    return client.post(
        "/auth/passkeys/register/verify",
        data=json.dumps({"credential": credential, "name": name}),
        content_type="application/json",
    )


def sign_in(
    client: Client, authenticator: SoftAuthenticator, time_zone: str | None = None, **kwargs
) -> TestResponse:
    options = client.post("/auth/passkeys/authenticate/options").json()
    assert options["allowCredentials"] == []  # discoverable: no user named up front
    assert options["userVerification"] == "required"
    credential = authenticator.get(options, **kwargs)
    return client.post(
        "/auth/passkeys/authenticate/verify",
        data=json.dumps({"credential": credential, "time_zone": time_zone}),
        content_type="application/json",
    )


def test_a_signed_in_person_registers_a_passkey_and_signs_in_with_it(client, owner, authenticator):
    client.force_login(owner)
    response = register(client, authenticator, name="Work laptop")
    assert response.status_code == 201, response.content
    passkey = Passkey.objects.get()
    assert passkey.name == "Work laptop" and passkey.user == owner

    client.post("/auth/sign-out")
    assert client.get("/").status_code == 302  # signed out

    response = sign_in(client, authenticator)
    assert response.status_code == 200, response.content
    assert response.json()["redirect"] == "/"
    assert client.get("/").url == "/w/acme/start"  # a new workspace: the getting-started guide
    passkey.refresh_from_db()
    assert passkey.sign_count == 1 and passkey.last_used_at is not None


def test_signing_in_brings_the_browsers_time_zone_along(client, owner, authenticator):
    client.force_login(owner)
    register(client, authenticator)
    client.post("/auth/sign-out")

    assert sign_in(client, authenticator, time_zone="Asia/Kolkata").status_code == 200

    assert Profile.objects.get(user=owner).time_zone == "Asia/Kolkata"
    # The very first page already reads in it (no round trip through the page's script needed).
    assert 'data-viewer-zone="Asia/Kolkata"' in client.get("/auth/passkeys").content.decode()


def test_a_zone_the_server_does_not_know_does_not_stop_the_sign_in(client, owner, authenticator):
    client.force_login(owner)
    register(client, authenticator)
    client.post("/auth/sign-out")

    assert sign_in(client, authenticator, time_zone="Mars/Olympus_Mons").status_code == 200
    assert not Profile.objects.filter(user=owner).exists()


def test_registration_requires_user_verification(client, owner, webauthn_settings):
    client.force_login(owner)
    no_uv = SoftAuthenticator(rp_id="testserver", origin=ORIGIN, user_verified=False)
    response = register(client, no_uv)
    assert response.status_code == 400
    assert Passkey.objects.count() == 0


def test_sign_in_requires_user_verification(client, owner, authenticator):
    client.force_login(owner)
    register(client, authenticator)
    client.post("/auth/sign-out")
    authenticator.user_verified = False
    assert sign_in(client, authenticator).status_code == 400
    assert client.get("/").status_code == 302


def test_a_response_from_another_origin_is_refused(client, owner, authenticator):
    client.force_login(owner)
    register(client, authenticator)
    client.post("/auth/sign-out")
    assert sign_in(client, authenticator, origin="https://evil.example").status_code == 400


def test_a_challenge_cannot_be_replayed(client, owner, authenticator):
    client.force_login(owner)
    register(client, authenticator)
    client.post("/auth/sign-out")
    options = client.post("/auth/passkeys/authenticate/options").json()
    credential = authenticator.get(options)
    body = json.dumps({"credential": credential})
    assert (
        client.post(
            "/auth/passkeys/authenticate/verify", data=body, content_type="application/json"
        ).status_code
        == 200
    )
    client.post("/auth/sign-out")
    replay = client.post("/auth/passkeys/authenticate/verify", data=body, content_type="application/json")
    assert replay.status_code == 400


def test_an_unknown_passkey_is_refused(client, owner, authenticator, webauthn_settings):
    client.force_login(owner)
    register(client, authenticator)
    client.post("/auth/sign-out")
    stranger = SoftAuthenticator(rp_id="testserver", origin=ORIGIN)
    stranger.user_handle = authenticator.user_handle
    assert sign_in(client, stranger).status_code == 400


def test_a_person_may_have_several_passkeys_rename_them_but_not_remove_the_last(
    client, owner, webauthn_settings
):
    client.force_login(owner)
    first, second = (SoftAuthenticator(rp_id="testserver", origin=ORIGIN) for _ in range(2))
    assert register(client, first, name="Laptop").status_code == 201
    assert register(client, second, name="Phone").status_code == 201
    laptop, phone = Passkey.objects.order_by("id")
    client.post(f"/auth/passkeys/{phone.pk}/rename", {"name": "Pixel"})
    phone.refresh_from_db()
    assert phone.name == "Pixel"
    client.post(f"/auth/passkeys/{laptop.pk}/delete")
    assert list(Passkey.objects.values_list("name", flat=True)) == ["Pixel"]
    page = client.post(f"/auth/passkeys/{phone.pk}/delete", follow=True)
    assert Passkey.objects.count() == 1
    assert "cannot remove your last passkey" in page.content.decode()


def test_a_name_with_a_nul_character_is_kept_with_a_replacement_character(client, owner, webauthn_settings):
    client.force_login(owner)
    authenticator = SoftAuthenticator(rp_id="testserver", origin=ORIGIN)
    assert register(client, authenticator, name="Lap\x00top").status_code == 201
    passkey = Passkey.objects.get()
    assert passkey.name == "Lap\ufffdtop"
    assert client.post(f"/auth/passkeys/{passkey.pk}/rename", {"name": "Pix\x00el"}).status_code == 302
    passkey.refresh_from_db()
    assert passkey.name == "Pix\ufffdel"


def test_a_blank_name_is_refused_in_words_and_the_passkey_keeps_its_own(client, owner, webauthn_settings):
    client.force_login(owner)
    assert (
        register(client, SoftAuthenticator(rp_id="testserver", origin=ORIGIN), name="Laptop").status_code
        == 201
    )
    passkey = Passkey.objects.get()

    page = client.post(f"/auth/passkeys/{passkey.pk}/rename", {"name": "   "}, follow=True)

    assert "A passkey needs a name: “Laptop” keeps its own." in page.content.decode()
    passkey.refresh_from_db()
    assert passkey.name == "Laptop"


def test_one_person_cannot_touch_anothers_passkeys(client, owner, authenticator):
    client.force_login(owner)
    register(client, authenticator)
    other = make_person("mallory@acme.test", role="viewer")
    client.force_login(other)
    passkey = Passkey.objects.get()
    assert client.post(f"/auth/passkeys/{passkey.pk}/delete").status_code == 404
    assert client.post(f"/auth/passkeys/{passkey.pk}/rename", {"name": "x"}).status_code == 404


def test_ceremony_starts_without_a_session_are_budgeted_per_address(db, settings):
    """Each start remembers its challenge in a session row: a client that sends no cookie gets a new row
    every time, so past the address's budget it is refused before anything is written."""
    settings.PASSKEY_SIGN_INS_PER_MINUTE_PER_IP = 3

    answers = [Client().post("/auth/passkeys/authenticate/options") for _ in range(5)]

    assert [answer.status_code for answer in answers] == [200, 200, 200, 429, 429]
    assert answers[-1]["Retry-After"] == "20" and "Too many sign-in attempts" in answers[-1].json()["error"]
    assert Session.objects.count() == 3
    other_address = Client(REMOTE_ADDR="192.0.2.7").post("/auth/passkeys/authenticate/options")
    assert other_address.status_code == 200


def test_registering_needs_a_signed_in_person(client, db):
    response = client.post("/auth/passkeys/register/options")
    assert response.status_code == 302 and response.url.startswith("/auth/sign-in")


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"credential": {"id": 1}}'])
def test_malformed_ceremony_bodies_are_refused_cleanly(client, owner, authenticator, body):
    client.post("/auth/passkeys/authenticate/options")
    response = client.post("/auth/passkeys/authenticate/verify", data=body, content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()
