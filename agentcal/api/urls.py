from django.urls import path

from agentcal.api.event_catalog import EventListView
from agentcal.api.health import HealthView
from agentcal.api.schema_view import SchemaView
from approvals import api as approvals
from audit.api import AuditListView
from bookings import api as bookings
from inboxes import api as inboxes
from sync import api as sync
from webhooks import api as webhooks
from workspaces.api import MeView

urlpatterns = [
    path("health", HealthView.as_view(), name="health"),
    path("me", MeView.as_view(), name="me"),
    path("schema", SchemaView.as_view(), name="schema"),
    path("calendars", bookings.CalendarListView.as_view(), name="calendars"),
    path("calendars/<str:calendar_id>", bookings.CalendarDetailView.as_view(), name="calendar"),
    path(
        "calendars/<str:calendar_id>/availability", bookings.AvailabilityView.as_view(), name="availability"
    ),
    path("availability/search", bookings.AvailabilitySearchView.as_view(), name="availability-search"),
    path("calendars/<str:calendar_id>/holds", bookings.HoldCreateView.as_view(), name="holds"),
    path("calendars/<str:calendar_id>/commits", bookings.CommitCreateView.as_view(), name="commits"),
    path(
        "calendars/<str:calendar_id>/bookings", bookings.BookingListView.as_view(), name="calendar-bookings"
    ),
    path(
        "calendars/<str:calendar_id>/connections",
        sync.ConnectionListView.as_view(),
        name="calendar-connections",
    ),
    path("connections/<str:connection_id>", sync.ConnectionDetailView.as_view(), name="connection"),
    path("connections/<str:connection_id>/sync", sync.ConnectionSyncView.as_view(), name="connection-sync"),
    path("holds", bookings.FindAndHoldView.as_view(), name="find-and-hold"),
    path("holds/<str:hold_id>", bookings.HoldDetailView.as_view(), name="hold"),
    path("holds/<str:hold_id>/extend", bookings.HoldExtendView.as_view(), name="hold-extend"),
    path("bookings/<str:booking_id>", bookings.BookingDetailView.as_view(), name="booking"),
    path("bookings/<str:booking_id>/move", bookings.BookingMoveView.as_view(), name="booking-move"),
    path("audit", AuditListView.as_view(), name="audit"),
    path("webhook-endpoints", webhooks.EndpointListView.as_view(), name="webhook-endpoints"),
    path(
        "webhook-endpoints/<str:endpoint_id>", webhooks.EndpointDetailView.as_view(), name="webhook-endpoint"
    ),
    path(
        "webhook-endpoints/<str:endpoint_id>/deliveries",
        webhooks.EndpointDeliveriesView.as_view(),
        name="webhook-endpoint-deliveries",
    ),
    path(
        "webhook-deliveries/<str:delivery_id>", webhooks.DeliveryDetailView.as_view(), name="webhook-delivery"
    ),
    path(
        "webhook-deliveries/<str:delivery_id>/replay",
        webhooks.DeliveryReplayView.as_view(),
        name="webhook-delivery-replay",
    ),
    path("events", EventListView.as_view(), name="events"),
    path("inbox", inboxes.InboxView.as_view(), name="inbox"),
    path("inbox/threads", inboxes.ThreadListView.as_view(), name="inbox-threads"),
    path("inbox/threads/<str:thread_id>", inboxes.ThreadDetailView.as_view(), name="inbox-thread"),
    path("inbox/messages", inboxes.MessageListView.as_view(), name="inbox-messages"),
    path("inbox/messages/<str:message_id>", inboxes.MessageDetailView.as_view(), name="inbox-message"),
    path("inbox/send", inboxes.SendView.as_view(), name="inbox-send"),
    path(
        "inbox/messages/<str:message_id>/reply",
        inboxes.MessageReplyView.as_view(),
        name="inbox-message-reply",
    ),
    path("inbox/messages/<str:message_id>/raw", inboxes.MessageRawView.as_view(), name="inbox-message-raw"),
    path(
        "inbox/messages/<str:message_id>/attachments/<str:attachment_id>",
        inboxes.AttachmentDownloadView.as_view(),
        name="inbox-attachment",
    ),
    path("approvals", approvals.ApprovalListView.as_view(), name="approvals"),
    path("approvals/<str:approval_id>", approvals.ApprovalDetailView.as_view(), name="approval"),
    path(
        "approvals/<str:approval_id>/cancel", approvals.ApprovalCancelView.as_view(), name="approval-cancel"
    ),
]
