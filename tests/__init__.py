from __future__ import annotations

import pytest

# Helper modules get pytest's assertion messages (it rewrites test modules and conftest files by
# itself); this must run before they are imported.
pytest.register_assert_rewrite(
    "tests.accounts.helpers",
    "tests.approvals.helpers",
    "tests.bench.helpers",
    "tests.bookings.helpers",
    "tests.clients.helpers",
    "tests.e2e.helpers",
    "tests.helpers",
    "tests.inboxes.helpers",
    "tests.webhooks.helpers",
)
