from __future__ import annotations

from django.apps import AppConfig


class InboxesConfig(AppConfig):
    name = "inboxes"
    verbose_name = "Agent inboxes"

    def ready(self) -> None:
        from approvals.services import approval_ended
        from inboxes.attachments import connect_signals
        from inboxes.review import review_ended

        connect_signals()

        # A review-first draft goes out, or is discarded, with the decision on its approval.
        approval_ended.connect(review_ended, dispatch_uid="inboxes.review_ended")
