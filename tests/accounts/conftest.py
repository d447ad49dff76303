from __future__ import annotations

from typing import Any

import pytest

from tests.accounts.authenticator import SoftAuthenticator
from tests.accounts.helpers import ORIGIN, make_person


@pytest.fixture
def webauthn_settings(settings: Any) -> Any:
    # Django's test client talks to "testserver"; in a browser the RP id is the real host name.
    settings.DASHBOARD_BASE_URL = ORIGIN
    settings.WEBAUTHN_RP_ID = "testserver"
    return settings


@pytest.fixture
def authenticator(webauthn_settings: Any) -> SoftAuthenticator:
    return SoftAuthenticator(rp_id="testserver", origin=ORIGIN)


@pytest.fixture
def owner(db: None) -> Any:
    return make_person("olivia@acme.test")
