from __future__ import annotations

from celery import shared_task
from django.contrib.sessions.backends.db import SessionStore

from accounts.links import magic_links_purge


@shared_task(name="accounts.purge_magic_links", ignore_result=True)
def purge_magic_links() -> int:
    return magic_links_purge()


@shared_task(name="accounts.purge_expired_sessions", ignore_result=True)
def purge_expired_sessions() -> None:
    # Django never deletes an expired session row by itself (it only stops honouring it), and every
    # visitor to a sign-in page gets one: without this the table grows with every anonymous visit.
    SessionStore.clear_expired()
