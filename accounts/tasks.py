from __future__ import annotations

from celery import shared_task

from accounts.links import magic_links_purge


@shared_task(name="accounts.purge_magic_links", ignore_result=True)
def purge_magic_links() -> int:
    return magic_links_purge()
