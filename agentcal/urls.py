from django.urls import include, path

from agentcal.views import metrics
from inboxes import inbound_webhook
from sync.push import endpoints as push

urlpatterns = [
    path("metrics", metrics, name="metrics"),
    path("v1/", include("agentcal.api.urls")),
    # Providers' push notifications (not the agent API: no key; each carries its channel's secret).
    path("hooks/google", push.google_notification, name="push-google"),
    path("hooks/microsoft", push.microsoft_notification, name="push-microsoft"),
    path("hooks/microsoft/lifecycle", push.microsoft_lifecycle, name="push-microsoft-lifecycle"),
    # Raw mail from a provider's inbound route (no key; signed with the workspace's own secret).
    path("hooks/inbound-mail/<str:workspace_id>", inbound_webhook.inbound_mail, name="inbound-mail"),
    path("auth/", include("accounts.urls")),
    path("", include("dashboard.urls")),
]

# Unknown URLs and crashes under /v1 answer in problem+json (agents parse one error format);
# the dashboard gets HTML pages.
handler404 = "agentcal.views.not_found"
handler500 = "agentcal.views.server_error"
# A role that may not do something, and a stale form: cards that say why and lead back (dashboard/errors.py).
handler403 = "dashboard.errors.permission_denied"
