"""Agents' inboxes as owners and admins see them: every agent's unread mail, one agent's threads, one
thread's messages, and attachment downloads.

Only with `Permission.READ_INBOXES` (others get 403). Looking is not reading: these pages never set a
message's `read_at`. Senders' HTML is shown inline, sanitized (inboxes.html), inside an element htmx
ignores, on a page whose Content-Security-Policy is the second guard.

Design: docs/architecture.md, "The dashboard".
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from accounts.roles import Permission
from dashboard.access import page_context, workspace_page
from dashboard.http import THREAD_PAGE_POLICY, DashboardRequest
from dashboard.lookups import agent_in
from dashboard.viewmodels.inbox import inbox_rows, link_reservations, message_view, thread_rows
from inboxes.addresses import workspace_domain
from inboxes.attachments import attachment_response
from inboxes.quotas import quota_usage
from inboxes.selectors import agent_attachment, agent_thread, agent_threads, thread_messages
from workspaces.models import Workspace

THREADS_PER_PAGE = 25
MAX_QUERY_CHARS = 200


# --- Pages -------------------------------------------------------------------------------------------------


@workspace_page(needs=Permission.READ_INBOXES)
def overview(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Every agent's inbox in the workspace, with unread and thread counts."""
    domain = workspace_domain(workspace)
    rows = inbox_rows(workspace, domain)
    context = page_context(
        request, "inboxes", rows=rows, total_unread=sum(row["unread"] for row in rows), domain=domain
    )
    return render(request, "dashboard/inbox/overview.html", context)


@workspace_page(needs=Permission.READ_INBOXES)
def thread_list(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    """`?q=` searches senders and subjects (htmx refreshes the results as one types); `?page=N`."""
    agent = agent_in(workspace, agent_id)
    query = request.GET.get("q", "").strip()[:MAX_QUERY_CHARS]
    page = Paginator(agent_threads(agent, query=query), THREADS_PER_PAGE).get_page(request.GET.get("page"))
    inbox_url = reverse("dashboard:agent_inbox", args=[workspace.slug, agent.public_id])
    context = page_context(
        request,
        "inboxes",
        agent=agent,
        address=f"{agent.slug}@{workspace_domain(workspace)}",
        rows=thread_rows(list(page.object_list)),
        page=page,
        query=query,
        inbox_url=inbox_url,
        previous_query=_page_query(query, page.previous_page_number()) if page.has_previous() else "",
        next_query=_page_query(query, page.next_page_number()) if page.has_next() else "",
    )
    template = "dashboard/inbox/threads.html"
    if request.htmx:
        template += "#thread-results"
    else:
        context["quota"] = quota_usage(agent)
    return render(request, template, context)


def _page_query(query: str, page_number: int) -> str:
    params: dict[str, str | int] = {"q": query, "page": page_number} if query else {"page": page_number}
    return urlencode(params)


@workspace_page(needs=Permission.READ_INBOXES)
def thread_view(
    request: DashboardRequest, workspace: Workspace, agent_id: str, thread_id: str
) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    thread = agent_thread(agent, thread_id)
    if thread is None:
        raise Http404("No such thread")
    views = [message_view(message) for message in thread_messages(agent, thread)]
    link_reservations(workspace, [view.invite for view in views if view.invite is not None])
    context = page_context(
        request,
        "inboxes",
        agent=agent,
        thread=thread,
        views=views,
        inbox_url=reverse("dashboard:agent_inbox", args=[workspace.slug, agent.public_id]),
    )
    response = render(request, "dashboard/inbox/thread.html", context)
    response["Content-Security-Policy"] = THREAD_PAGE_POLICY
    return response


@workspace_page(needs=Permission.READ_INBOXES)
def attachment_download(
    request: DashboardRequest, workspace: Workspace, agent_id: str, message_id: str, attachment_id: str
) -> HttpResponse:
    """Always a download (never shown in the dashboard's origin), under a type that cannot be sniffed."""
    agent = agent_in(workspace, agent_id)
    attachment = agent_attachment(agent, message_id=message_id, attachment_id=attachment_id)
    if attachment is None or not attachment.file:
        raise Http404("No such attachment")
    return attachment_response(attachment)
