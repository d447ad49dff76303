from django.templatetags.static import static
from django.urls import path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from dashboard.views import (
    agents,
    approvals,
    audit,
    calendars,
    connections,
    guardrails,
    home,
    inbox,
    mail_settings,
    metrics,
    team,
)

app_name = "dashboard"
W = "w/<slug:workspace_slug>"
urlpatterns = [
    path("", home.home, name="home"),
    # Browsers and feed readers ask for /favicon.ico whatever the page links; WhiteNoise serves the file
    # (its URL is looked up on first use: a manifest storage knows it only after collectstatic).
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("dashboard/favicon.ico"), permanent=True)),
    # A new workspace's getting-started guide (dashboard/views/home.py); its steps' POSTs come back to it.
    path(f"{W}/start", home.start, name="start"),
    path(f"{W}/start/agent", home.start_agent, name="start_agent"),
    path(f"{W}/start/key", home.start_key, name="start_key"),
    path(f"{W}/start/hide", home.start_hide, name="start_hide"),
    path(f"{W}/approvals", approvals.queue, name="approvals"),
    # Before the approval's own URL, which would take "pending-count" for an id.
    path(f"{W}/approvals/pending-count", approvals.pending_badge, name="approvals_pending_count"),
    path(f"{W}/approvals/<str:approval_id>", approvals.detail, name="approval"),
    path(f"{W}/approvals/<str:approval_id>/decide", approvals.decide, name="approval_decide"),
    path(f"{W}/audit", audit.browser, name="audit"),
    path(f"{W}/audit.csv", audit.export_csv, name="audit_csv"),
    path(f"{W}/calendars", calendars.calendar_list, name="calendars"),
    path(f"{W}/calendars/<str:calendar_id>", calendars.calendar_view, name="calendar"),
    path(f"{W}/metrics", metrics.metrics, name="metrics"),
    path(f"{W}/agents", agents.agent_list, name="agents"),
    path(f"{W}/agents/<str:agent_id>", agents.agent_detail, name="agent"),
]

# Agents' inboxes: owners and admins only (dashboard/views/inbox.py says why).
urlpatterns += [
    path(f"{W}/inboxes", inbox.overview, name="inboxes"),
    path(f"{W}/agents/<str:agent_id>/inbox", inbox.thread_list, name="agent_inbox"),
    path(f"{W}/agents/<str:agent_id>/inbox/<str:thread_id>", inbox.thread_view, name="agent_inbox_thread"),
    path(
        f"{W}/agents/<str:agent_id>/inbox/messages/<str:message_id>/attachments/<str:attachment_id>",
        inbox.attachment_download,
        name="agent_inbox_attachment",
    ),
]

# Agents & keys: POST actions for owners and admins (creating an agent is a POST to the list).
urlpatterns += [
    path(f"{W}/agents/<str:agent_id>/priority", agents.agent_edit, name="agent_edit"),
    path(
        f"{W}/agents/<str:agent_id>/inbox-settings", agents.agent_inbox_settings, name="agent_inbox_settings"
    ),
    path(f"{W}/agents/<str:agent_id>/keys", agents.key_create, name="agent_key_create"),
    # A new key's page (GET): its raw value shown once, after the POST that made it (post/redirect/get).
    path(f"{W}/agents/<str:agent_id>/keys/<str:key_prefix>/new", agents.key_new, name="agent_key_new"),
    path(f"{W}/agents/<str:agent_id>/name", agents.agent_rename_view, name="agent_rename"),
    path(f"{W}/agents/<str:agent_id>/disable", agents.agent_disable, name="agent_disable"),
    path(f"{W}/agents/<str:agent_id>/enable", agents.agent_enable, name="agent_enable"),
    path(
        f"{W}/agents/<str:agent_id>/keys/<str:key_prefix>/revoke", agents.key_revoke, name="agent_key_revoke"
    ),
    path(
        f"{W}/agents/<str:agent_id>/keys/<str:key_prefix>/rotate", agents.key_rotate, name="agent_key_rotate"
    ),
]

# Guardrails: owners pause and resume one agent or all (GET on a pause leads to its confirm step); owners
# and admins set limits, the workspace's defaults (everyone reads them) and dismiss notices of limits met.
urlpatterns += [
    path(f"{W}/agents/<str:agent_id>/pause", agents.agent_pause_view, name="agent_pause"),
    path(f"{W}/agents/<str:agent_id>/resume", agents.agent_resume_view, name="agent_resume"),
    path(f"{W}/agents/<str:agent_id>/limits", agents.agent_limits_edit, name="agent_limits"),
    path(f"{W}/pause", guardrails.pause, name="workspace_pause"),
    path(f"{W}/resume", guardrails.resume, name="workspace_resume"),
    path(f"{W}/notices/dismiss", guardrails.notices_dismiss_view, name="notices_dismiss"),
    path(f"{W}/settings/limits", guardrails.limit_defaults, name="limit_defaults"),
]

# Upstream calendars: POST actions for owners and admins, from the calendar's page.
urlpatterns += [
    path(
        f"{W}/calendars/<str:calendar_id>/connection",
        calendars.connection_connect,
        name="connection_connect",
    ),
    path(
        f"{W}/connections/<str:connection_id>/sync", connections.connection_sync_now, name="connection_sync"
    ),
    path(
        f"{W}/calendars/<str:calendar_id>/connect/<str:provider>",
        connections.connection_oauth_start,
        name="connection_oauth_start",
    ),
    path(
        f"{W}/calendars/<str:calendar_id>/connect/<str:provider>/pick",
        connections.connection_oauth_pick,
        name="connection_oauth_pick",
    ),
    path("oauth/<str:provider>/callback", connections.oauth_callback, name="oauth_callback"),
    path(
        f"{W}/connections/<str:connection_id>/disconnect",
        connections.connection_disconnect,
        name="connection_disconnect",
    ),
]

# Mail settings: everyone reads; owners and admins set the domain and generate the webhook secret.
urlpatterns += [
    path(f"{W}/settings/mail", mail_settings.mail_settings, name="mail_settings"),
    path(f"{W}/settings/mail/secret", mail_settings.webhook_secret, name="mail_webhook_secret"),
]

# The team: every member reads it; owners invite, change roles and remove; anyone may leave.
urlpatterns += [
    path(f"{W}/team", team.team, name="team"),
    path(f"{W}/team/invitations", team.invite, name="team_invite"),
    path(
        f"{W}/team/invitations/<int:invitation_id>/resend",
        team.invitation_send_again,
        name="team_invitation_resend",
    ),
    path(
        f"{W}/team/invitations/<int:invitation_id>/revoke",
        team.invitation_withdraw,
        name="team_invitation_revoke",
    ),
    path(f"{W}/team/members/<int:membership_id>/role", team.member_role, name="team_member_role"),
    path(
        f"{W}/team/members/<int:membership_id>/remove",
        team.member_leave_or_remove,
        name="team_member_remove",
    ),
]

# Calendars: settings and rules (everyone reads, owners and admins change; creating one is a POST to the
# list), and a reservation's drawer with the owner's actions on it (POST, owners and admins).
urlpatterns += [
    path(f"{W}/calendars/<str:calendar_id>/settings", calendars.calendar_settings, name="calendar_settings"),
    path(
        f"{W}/calendars/<str:calendar_id>/settings/preview",
        calendars.settings_preview,
        name="calendar_settings_preview",
    ),
    path(
        f"{W}/calendars/<str:calendar_id>/reservations/<str:reservation_id>",
        calendars.reservation_drawer,
        name="calendar_reservation",
    ),
    path(
        f"{W}/calendars/<str:calendar_id>/reservations/<str:reservation_id>/cancel",
        calendars.reservation_cancel,
        name="calendar_reservation_cancel",
    ),
    path(
        f"{W}/calendars/<str:calendar_id>/reservations/<str:reservation_id>/move",
        calendars.reservation_move,
        name="calendar_reservation_move",
    ),
    path(
        f"{W}/calendars/<str:calendar_id>/reservations/<str:reservation_id>/release",
        calendars.reservation_release,
        name="calendar_reservation_release",
    ),
]
