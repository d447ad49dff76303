"""The approval tests' own fixture: a teammate who may decide.

Agents (`sdr`, `exec_assistant`, `outsider`) and the live server come from tests/conftest.py; the owner,
`make_person`, the webhook receiver and the in-process Celery worker from tests/approvals/fixtures.py and
tests/webhooks/fixtures.py (registered in tests/conftest.py); request helpers are in
tests/approvals/helpers.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from tests.helpers import Persona


@pytest.fixture
def teammate(sdr: Persona, make_person: Callable[..., User]) -> User:
    """An ordinary member of acme: may decide, gets no emails."""
    return make_person("tom@acme.test", workspace=sdr.agent.workspace, role="approver")
