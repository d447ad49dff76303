"""The workspace's mail settings: where its agents' mail is received (the inbound domain and the MX record
to publish for it), the inbound webhook's URL and signing secret, and how outgoing mail is signed (the
DKIM record to publish).

Every member can read the page; only owners and admins change the domain, verify it or generate a
secret (each change audited by inboxes.mail_settings). A domain of the workspace's own waits, with the
TXT record that proves it shown here, until Verify finds that record. A new secret is shown once,
post/redirect/get (dashboard.one_time): the POST keeps it sealed in the person's session and answers 303
to the secret's page, which takes it out as it renders it; a reload shows "already shown".
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods

from accounts.roles import Permission
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.one_time import Reveal, keep_for_display, see_other, take_for_display
from inboxes.addresses import workspace_domain
from inboxes.dkim import signing_key
from inboxes.mail_settings import (
    MAX_DOMAIN_LENGTH,
    InboundDomainInvalid,
    InboundDomainTaken,
    InboundDomainUnverified,
    NoPendingInboundDomain,
    default_inbound_domain,
    inbound_domain_set,
    inbound_domain_verify,
    inbound_webhook_secret_issue,
    verification_record_name,
    verification_record_value,
)
from workspaces.models import Workspace
from workspaces.selectors import first_active_agent


class InboundDomainForm(forms.Form):
    # Blank means the default domain; the rules live in inboxes.mail_settings.
    inbound_domain = forms.CharField(max_length=MAX_DOMAIN_LENGTH, required=False, strip=True)


@require_http_methods(["GET", "HEAD", "POST"])
def mail_settings(request: HttpRequest, workspace_slug: str) -> HttpResponse:
    """GET shows the settings; POST sets the inbound domain, or with `action=verify` verifies the pending
    one (owners and admins)."""
    if request.method == "POST":
        if request.POST.get("action") == "verify":
            return _domain_verify(request, workspace_slug)
        return _domain_update(request, workspace_slug)
    return _mail_settings(request, workspace_slug)


@workspace_page()
def _mail_settings(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return _render(request, workspace)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _domain_update(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = InboundDomainForm(request.POST)
    if form.is_valid():
        try:
            pending = inbound_domain_set(actor=request.actor, domain=form.cleaned_data["inbound_domain"])
        except (InboundDomainInvalid, InboundDomainTaken) as exc:
            form.add_error("inbound_domain", exc.detail)
        else:
            if pending:
                messages.success(
                    request,
                    f"Publish the TXT record shown for {pending}, then press Verify. Until then agents "
                    f"keep receiving mail at …@{workspace_domain(workspace)}.",
                )
            else:
                messages.success(request, f"Agents now receive mail at …@{workspace_domain(workspace)}.")
            return redirect("dashboard:mail_settings", workspace.slug)
    return _render(request, workspace, form=form, status=400)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _domain_verify(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    try:
        domain = inbound_domain_verify(actor=request.actor)
    except (InboundDomainUnverified, InboundDomainTaken, NoPendingInboundDomain) as exc:
        workspace.refresh_from_db()
        return _render(request, workspace, verify_error=exc.detail, status=exc.status)
    messages.success(request, f"{domain} is verified: agents now receive mail at …@{domain}.")
    return redirect("dashboard:mail_settings", workspace.slug)


def _secret_slot(workspace: Workspace) -> str:
    # One slot per workspace: only the newest secret works, so a newer one rightly replaces an unseen one.
    return f"inbound-webhook-secret:{workspace.public_id}"


@require_http_methods(["GET", "HEAD", "POST"])
def webhook_secret(request: HttpRequest, workspace_slug: str) -> HttpResponse:
    """POST generates (or rotates) the secret (owners and admins) and redirects here; GET shows it once."""
    if request.method == "POST":
        return _webhook_secret_issue(request, workspace_slug)
    return _webhook_secret_show(request, workspace_slug)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _webhook_secret_issue(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    rotated = bool(workspace.inbound_webhook_secret)
    secret = inbound_webhook_secret_issue(workspace=workspace, actor=request.actor)
    keep_for_display(request, _secret_slot(workspace), secret, rotated=rotated)
    return see_other("dashboard:mail_webhook_secret", workspace.slug)


@workspace_page()
def _webhook_secret_show(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    response = _render(request, workspace, secret=take_for_display(request, _secret_slot(workspace)))
    # The page that carries the secret: no browser or proxy may keep a copy.
    add_never_cache_headers(response)
    return response


def _render(
    request: DashboardRequest,
    workspace: Workspace,
    *,
    form: InboundDomainForm | None = None,
    secret: Reveal | None = None,
    verify_error: str = "",
    status: int = 200,
) -> HttpResponse:
    domain = workspace_domain(workspace)
    example_agent = first_active_agent(workspace)
    webhook_path = reverse("inbound-mail", args=[workspace.public_id])
    context = page_context(
        request,
        "mail",
        domain=domain,
        default_domain=default_inbound_domain(workspace),
        custom_domain=workspace.inbound_domain,
        pending_domain=workspace.inbound_domain_pending,
        verification_name=verification_record_name(workspace.inbound_domain_pending),
        verification_value=verification_record_value(workspace.inbound_domain_token),
        verify_error=verify_error,
        example_address=f"{example_agent.slug if example_agent else 'agent'}@{domain}",
        mx_host=settings.INBOUND_MX_HOST,
        smtp_port=settings.INBOUND_SMTP_PORT,
        webhook_url=settings.INBOUND_WEBHOOK_BASE_URL + webhook_path,
        has_secret=bool(workspace.inbound_webhook_secret),
        secret=secret,
        max_message_bytes=settings.INBOUND_MAX_MESSAGE_BYTES,
        dkim=signing_key(),
        relay_configured=settings.INBOX_RELAY_CONFIGURED,
        form=form
        or InboundDomainForm(
            initial={"inbound_domain": workspace.inbound_domain_pending or workspace.inbound_domain}
        ),
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
    )
    return render(request, "dashboard/settings/mail.html", context, status=status)
