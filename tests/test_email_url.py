"""EMAIL_URL: the relay as one URL, read into Django's EMAIL_* settings."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentcal.env import EmailRelay, email_url_settings


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://relay.example.com", EmailRelay("relay.example.com", 25, "", "", starttls=False, ssl=False)),
        (
            "smtp://postmaster%40acme.com:p%3Ass@smtp.example.com:587?tls=1",
            EmailRelay("smtp.example.com", 587, "postmaster@acme.com", "p:ss", starttls=True, ssl=False),
        ),
        (
            "smtp://u:p@mx.example.com?tls=true",
            EmailRelay("mx.example.com", 587, "u", "p", starttls=True, ssl=False),
        ),
        ("smtps://u:p@mx.example.com", EmailRelay("mx.example.com", 465, "u", "p", starttls=False, ssl=True)),
    ],
)
def test_a_relay_url_becomes_host_port_credentials_and_tls(url: str, expected: EmailRelay) -> None:
    assert email_url_settings(url) == expected


@pytest.mark.parametrize("url", ["http://relay.example.com", "smtp://", "smtp://relay.example.com:notaport"])
def test_a_bad_relay_url_stops_the_start_with_a_clear_message(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="EMAIL_URL"):
        email_url_settings(url)
