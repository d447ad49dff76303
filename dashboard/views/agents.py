"""Agents and their API keys: who may book at what priority, and with which credentials.

Everyone in the workspace reads these pages; owners and admins create, rename, disable and enable
agents, set priorities, inbox and request limits, create, rotate and revoke keys; owners alone pause and
resume agents, after a confirm step that offers to release live holds too (each change audited).

A new raw key is shown once, post/redirect/get (dashboard.one_time): the POST that makes it keeps it
sealed in the person's session and answers 303 to the key's own page, which takes it out as it renders
it. A reload shows "already shown" and mints nothing; the key is never in a URL, and after that one page
it is kept nowhere — the database has only its hash.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from accounts.roles import Permission
from agentcal.clock import server_now
from agentcal.errors import InvalidRequest
from dashboard.access import page_context, workspace_page
from dashboard.forms import LimitsForm
from dashboard.http import DashboardRequest
from dashboard.lookups import agent_in
from dashboard.one_time import keep_for_display, see_other, take_for_display
from dashboard.viewmodels.agent_stats import agent_stats, endpoint_status, key_status
from dashboard.viewmodels.conversion import CONVERSION_DEFINITION, CONVERSION_EXCLUDES
from dashboard.viewmodels.guardrails import agent_limits_context, notice_lines
from dashboard.wording import holds_released
from guardrails.selectors import agent_releasable_holds, open_notices, workspace_releasable_holds
from guardrails.services import agent_limits_update, agent_pause, agent_resume
from inboxes.quotas import MAX_LIMIT, default_limits, inbox_settings_update
from webhooks.selectors import agent_endpoints, recent_attempts
from workspaces.models import MAX_PRIORITY, MIN_PRIORITY, Agent, ApiKey, Scope, Workspace
from workspaces.selectors import (
    agent_key,
    agent_key_by_pk,
    agent_keys,
    agents_with_key_counts,
)
from workspaces.services import (
    DEFAULT_PRIORITY,
    AgentSlugTaken,
    InvalidScopes,
    KeyNotActive,
    PriorityOutOfBounds,
    agent_create,
    agent_rename,
    agent_set_active,
    agent_update,
    api_key_issue,
    api_key_revoke,
    api_key_rotate,
)

# How long a rotated key keeps working, so agents can switch over without an outage.
GRACE_PERIODS = {
    "1h": ("1 hour", timedelta(hours=1)),
    "24h": ("24 hours", timedelta(hours=24)),
    "7d": ("7 days", timedelta(days=7)),
}
DEFAULT_GRACE = "24h"
MIB = 1024 * 1024
MAX_STORAGE_LIMIT_MIB = 1024 * 1024 * 1024  # a petabyte: far beyond any real mailbox
RECENT_ATTEMPTS = 10


# --- Forms: parsing and field errors only; the rules live in workspaces.services -------------------------


class _PriorityFields(forms.Form):
    priority = forms.IntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY)
    max_priority = forms.IntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        priority, ceiling = data.get("priority"), data.get("max_priority")
        if priority is not None and ceiling is not None and ceiling < priority:
            self.add_error("max_priority", "Must be at least the default priority.")
        return data


class AgentCreateForm(_PriorityFields):
    name = forms.CharField(max_length=200, strip=True)
    slug = forms.SlugField(
        max_length=64, required=False, help_text="Lowercase; derived from the name when blank."
    )
    max_priority = forms.IntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, required=False)

    def clean_slug(self) -> str:
        # The local part of the agent's mail address, matched without regard to case: kept lowercase.
        return str(self.cleaned_data["slug"]).lower()


class PriorityForm(_PriorityFields):
    pass


class RenameForm(forms.Form):
    name = forms.CharField(max_length=200, strip=True)


class InboxSettingsForm(forms.Form):
    """Review first and the agent's own send limits; a blank limit means the installation default."""

    review_first = forms.BooleanField(required=False)
    burst_limit = forms.IntegerField(required=False, min_value=0, max_value=MAX_LIMIT)
    daily_send_limit = forms.IntegerField(required=False, min_value=0, max_value=MAX_LIMIT)
    daily_recipient_limit = forms.IntegerField(required=False, min_value=0, max_value=MAX_LIMIT)
    # In MiB: nobody thinks of a mailbox in bytes.
    storage_limit_mib = forms.IntegerField(required=False, min_value=0, max_value=MAX_STORAGE_LIMIT_MIB)

    @classmethod
    def of(cls, agent: Agent) -> InboxSettingsForm:
        storage = agent.inbox_storage_limit_bytes
        return cls(
            initial={
                "review_first": agent.inbox_review_first,
                "burst_limit": agent.inbox_burst_limit,
                "daily_send_limit": agent.inbox_daily_send_limit,
                "daily_recipient_limit": agent.inbox_daily_recipient_limit,
                "storage_limit_mib": None if storage is None else storage // MIB,
            }
        )

    def settings(self) -> dict[str, Any]:
        data = self.cleaned_data
        mib = data["storage_limit_mib"]
        return {
            "review_first": data["review_first"],
            "burst_limit": data["burst_limit"],
            "daily_send_limit": data["daily_send_limit"],
            "daily_recipient_limit": data["daily_recipient_limit"],
            "storage_limit_bytes": None if mib is None else mib * MIB,
        }


class KeyCreateForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, strip=True)
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, error_messages={"required": "Choose at least one scope."}
    )


class RotateForm(forms.Form):
    grace = forms.ChoiceField(choices=[(value, label) for value, (label, _) in GRACE_PERIODS.items()])


# --- Agent list and creation --------------------------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
def agent_list(request: HttpRequest, workspace_slug: str) -> HttpResponse:
    """GET lists the agents; POST creates one (owners and admins)."""
    if request.method == "POST":
        return _agent_create(request, workspace_slug)
    return _agent_list(request, workspace_slug)


def _render_agent_list(
    request: DashboardRequest, workspace: Workspace, form: AgentCreateForm | None = None, status: int = 200
) -> HttpResponse:
    agents = agents_with_key_counts(workspace, now=server_now())
    stats = agent_stats(workspace, agents)
    # The confirm step of "Pause all agents" (`?confirm=pause`), for those who may pause.
    confirm_pause = request.GET.get("confirm") == "pause" and request.membership.may(Permission.PAUSE_AGENTS)
    context = page_context(
        request,
        "agents",
        rows=[{"agent": agent, "stats": stats[agent.pk]} for agent in agents],
        form=form or AgentCreateForm(initial={"priority": DEFAULT_PRIORITY}),
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
        notices=notice_lines(open_notices(workspace)),
        confirm_pause=confirm_pause,
        conversion_definition=CONVERSION_DEFINITION,
        conversion_excludes=CONVERSION_EXCLUDES,
        releasable_holds=workspace_releasable_holds(workspace) if confirm_pause else 0,
        min_priority=MIN_PRIORITY,
        max_priority=MAX_PRIORITY,
        retention_days=workspace.audit_retention_days,
    )
    return render(request, "dashboard/agents/list.html", context, status=status)


@workspace_page()
def _agent_list(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return _render_agent_list(request, workspace)


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _agent_create(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = AgentCreateForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            agent = agent_create(
                actor=request.actor,
                name=data["name"],
                slug=data["slug"],
                priority=data["priority"],
                max_priority=data["max_priority"],
            )
        except AgentSlugTaken:
            form.add_error("slug", "Another agent in this workspace already has this slug.")
        except PriorityOutOfBounds as exc:
            form.add_error("max_priority", str(exc))
        else:
            messages.success(request, f"Agent {agent.name} created. Give it a key to start booking.")
            return redirect("dashboard:agent", workspace.slug, agent.public_id)
    return _render_agent_list(request, workspace, form=form, status=400)


# --- Agent detail and its actions ---------------------------------------------------------------------------


def _key(agent: Agent, key_prefix: str) -> ApiKey:
    key = agent_key(agent, prefix=key_prefix)
    if key is None:
        raise Http404("No such key")
    return key


def _render_agent_detail(
    request: DashboardRequest,
    workspace: Workspace,
    agent: Agent,
    *,
    status: int = 200,
    priority_form: PriorityForm | None = None,
    rename_form: RenameForm | None = None,
    key_form: KeyCreateForm | None = None,
    inbox_form: InboxSettingsForm | None = None,
    limits_form: LimitsForm | None = None,
    confirm_pause: bool = False,
) -> HttpResponse:
    now = server_now()
    defaults = default_limits()  # what a blank limit means, shown as each field's placeholder
    inbox_form = inbox_form or InboxSettingsForm.of(agent)
    keys = agent_keys(agent)
    endpoint_rows = [
        {
            "endpoint": endpoint,
            "status": endpoint_status(endpoint),
            "attempts": recent_attempts(endpoint, limit=RECENT_ATTEMPTS),
        }
        for endpoint in agent_endpoints(agent)
    ]
    context = page_context(
        request,
        "agents",
        page_url=reverse("dashboard:agent", args=[workspace.slug, agent.public_id]),
        agent=agent,
        stats=agent_stats(workspace, [agent])[agent.pk],
        keys=[{"key": key, "status": key_status(key, now, agent_is_active=agent.is_active)} for key in keys],
        endpoints=endpoint_rows,
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
        rename_form=rename_form or RenameForm(initial={"name": agent.name}),
        priority_form=priority_form
        or PriorityForm(initial={"priority": agent.priority, "max_priority": agent.max_priority}),
        key_form=key_form or KeyCreateForm(),
        inbox_form=inbox_form,
        inbox_fields=[
            (inbox_form["burst_limit"], f"Burst (per {defaults.burst_window_seconds} s)", defaults.burst),
            (inbox_form["daily_send_limit"], "Messages per day", defaults.daily_sends),
            (inbox_form["daily_recipient_limit"], "Recipients per day", defaults.daily_recipients),
            (inbox_form["storage_limit_mib"], "Mailbox size (MiB)", defaults.storage_bytes // MIB),
        ],
        inbox_defaults=defaults,
        scopes=Scope.choices,
        grace_periods=[(value, label) for value, (label, _) in GRACE_PERIODS.items()],
        default_grace=DEFAULT_GRACE,
        min_priority=MIN_PRIORITY,
        max_priority=MAX_PRIORITY,
        retention_days=workspace.audit_retention_days,
        confirm_pause=confirm_pause and request.membership.may(Permission.PAUSE_AGENTS),
        releasable_holds=agent_releasable_holds(agent) if confirm_pause else 0,
        **agent_limits_context(agent, workspace, limits_form),
    )
    return render(request, "dashboard/agents/detail.html", context, status=status)


@workspace_page()
def agent_detail(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    """The agent's page; `?confirm=pause` opens the pause's confirm step (for those who may pause)."""
    agent = agent_in(workspace, agent_id)
    return _render_agent_detail(
        request, workspace, agent, confirm_pause=request.GET.get("confirm") == "pause"
    )


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def agent_edit(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    form = PriorityForm(request.POST)
    if form.is_valid():
        try:
            agent = agent_update(
                actor=request.actor,
                agent=agent,
                priority=form.cleaned_data["priority"],
                max_priority=form.cleaned_data["max_priority"],
            )
        except PriorityOutOfBounds as exc:
            form.add_error("max_priority", str(exc))
        else:
            messages.success(request, f"Priority set to {agent.priority} (max {agent.max_priority}).")
            return redirect("dashboard:agent", workspace.slug, agent.public_id)
    return _render_agent_detail(request, workspace, agent, status=400, priority_form=form)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def agent_rename_view(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    form = RenameForm(request.POST)
    if not form.is_valid():
        return _render_agent_detail(request, workspace, agent, status=400, rename_form=form)
    previous = agent.name
    agent = agent_rename(actor=request.actor, agent=agent, name=form.cleaned_data["name"])
    if agent.name != previous:
        messages.success(request, f"Renamed {previous} to {agent.name}. Its slug and mail address stay.")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def agent_disable(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent, changed = agent_set_active(actor=request.actor, agent=agent_in(workspace, agent_id), active=False)
    if changed:
        messages.success(
            request, f"{agent.name} is disabled: its keys are refused and mail to its address bounces."
        )
    else:
        messages.error(request, f"{agent.name} was already disabled.")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def agent_enable(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent, changed = agent_set_active(actor=request.actor, agent=agent_in(workspace, agent_id), active=True)
    if changed:
        messages.success(request, f"{agent.name} is enabled again: its live keys work from now on.")
    else:
        messages.error(request, f"{agent.name} was already enabled.")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def agent_inbox_settings(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    form = InboxSettingsForm(request.POST)
    if not form.is_valid():
        return _render_agent_detail(request, workspace, agent, status=400, inbox_form=form)
    agent = inbox_settings_update(actor=request.actor, agent=agent, **form.settings())
    review = "every send waits for approval" if agent.inbox_review_first else "sends go out directly"
    messages.success(request, f"Inbox settings saved: {review}.")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def agent_limits_edit(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    form = LimitsForm(request.POST)
    limits = form.limits()
    if limits is not None:
        try:
            agent = agent_limits_update(actor=request.actor, agent=agent, limits=limits)
        except InvalidRequest as exc:
            form.refused(exc.extra.get("errors", {}))
        else:
            messages.success(request, f"Limits of {agent.name} saved: they apply from its next request.")
            return redirect(reverse("dashboard:agent", args=[workspace.slug, agent.public_id]) + "#limits")
    return _render_agent_detail(request, workspace, agent, status=400, limits_form=form)


@require_http_methods(["GET", "HEAD", "POST"])
def agent_pause_view(request: HttpRequest, workspace_slug: str, agent_id: str) -> HttpResponse:
    """POST pauses the agent (owners), from the confirm step; GET leads to that step."""
    if request.method == "POST":
        return _agent_pause(request, workspace_slug, agent_id)
    return _to_pause_confirm(request, workspace_slug, agent_id)


@workspace_page()
def _to_pause_confirm(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    return redirect(reverse("dashboard:agent", args=[workspace.slug, agent.public_id]) + "?confirm=pause")


@workspace_page(needs=Permission.PAUSE_AGENTS)
def _agent_pause(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    stopped = agent_pause(
        actor=request.actor, agent=agent, release_holds=request.POST.get("release_holds") == "on"
    )
    released = holds_released(stopped.released)
    if stopped.changed:
        messages.success(
            request,
            f"{agent.name} is paused: its writes are refused from now on; reads still work.{released}",
        )
    else:
        messages.error(request, f"{agent.name} was already paused.{released}")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


@require_POST
@workspace_page(needs=Permission.PAUSE_AGENTS)
def agent_resume_view(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    if not agent_resume(actor=request.actor, agent=agent):
        messages.error(request, f"{agent.name} was not paused.")
    elif workspace.paused_at is not None:
        messages.success(request, f"{agent.name} is resumed, but the whole workspace is still paused.")
    else:
        messages.success(request, f"{agent.name} is resumed: its writes work again.")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


def _key_slot(key: ApiKey) -> str:
    return f"api-key:{key.prefix}"


@require_http_methods(["GET", "HEAD", "POST"])
def key_create(request: HttpRequest, workspace_slug: str, agent_id: str) -> HttpResponse:
    """POST creates a key (owners and admins). GET is this URL opened later, or reloaded after a form
    error: the place to create one is the agent's page."""
    if request.method == "POST":
        return _key_create(request, workspace_slug, agent_id)
    return _to_agent_page(request, workspace_slug, agent_id, anchor="key-create")


@workspace_page()
def _to_agent_page(
    request: DashboardRequest, workspace: Workspace, agent_id: str, anchor: str
) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    return redirect(reverse("dashboard:agent", args=[workspace.slug, agent.public_id]) + f"#{anchor}")


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _key_create(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    form = KeyCreateForm(request.POST)
    if form.is_valid():
        try:
            key, raw = api_key_issue(
                actor=request.actor,
                agent=agent,
                scopes=form.cleaned_data["scopes"],
                name=form.cleaned_data["name"],
            )
        except InvalidScopes as exc:
            form.add_error("scopes", str(exc))
        else:
            keep_for_display(request, _key_slot(key), raw)
            return see_other("dashboard:agent_key_new", workspace.slug, agent.public_id, key.prefix)
    return _render_agent_detail(request, workspace, agent, status=400, key_form=form)


@workspace_page()
def key_new(request: DashboardRequest, workspace: Workspace, agent_id: str, key_prefix: str) -> HttpResponse:
    """A new key's page: its raw value the first time the person who made it opens it, then never."""
    agent = agent_in(workspace, agent_id)
    key = _key(agent, key_prefix)
    reveal = take_for_display(request, _key_slot(key))
    rotated_from = (
        agent_key_by_pk(agent, reveal.facts["rotated_from"]) if reveal.facts.get("rotated_from") else None
    )
    context = page_context(
        request,
        "agents",
        agent=agent,
        key=key,
        status=key_status(key, server_now(), agent_is_active=agent.is_active),
        reveal=reveal,
        rotated_from=rotated_from,
        grace_label=reveal.facts.get("grace_label", ""),
        api_base=settings.DASHBOARD_BASE_URL + "/v1",
        can_manage=request.membership.may(Permission.MANAGE_WORKSPACE),
    )
    response = render(request, "dashboard/agents/new_key.html", context)
    # The page that carries a raw key: no browser or proxy may keep a copy (nor of "already shown").
    add_never_cache_headers(response)
    return response


@require_POST
@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def key_revoke(
    request: DashboardRequest, workspace: Workspace, agent_id: str, key_prefix: str
) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    key = _key(agent, key_prefix)
    try:
        api_key_revoke(actor=request.actor, key=key)
    except KeyNotActive:
        messages.error(request, f"Key {key.prefix}… was already revoked.")
    else:
        messages.success(request, f"Key {key.prefix}… revoked. Requests with it are refused from now on.")
    return redirect("dashboard:agent", workspace.slug, agent.public_id)


@require_http_methods(["GET", "HEAD", "POST"])
def key_rotate(request: HttpRequest, workspace_slug: str, agent_id: str, key_prefix: str) -> HttpResponse:
    """POST rotates the key (owners and admins); GET (this URL opened later) leads to the agent's keys."""
    if request.method == "POST":
        return _key_rotate(request, workspace_slug, agent_id, key_prefix)
    return _to_agent_page(request, workspace_slug, agent_id, anchor="api-keys")


@workspace_page(needs=Permission.MANAGE_WORKSPACE)
def _key_rotate(
    request: DashboardRequest, workspace: Workspace, agent_id: str, key_prefix: str
) -> HttpResponse:
    agent = agent_in(workspace, agent_id)
    old = _key(agent, key_prefix)
    form = RotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose how long the old key keeps working.")
        return redirect("dashboard:agent", workspace.slug, agent.public_id)
    label, grace = GRACE_PERIODS[form.cleaned_data["grace"]]
    try:
        key, raw = api_key_rotate(actor=request.actor, key=old, grace=grace)
    except KeyNotActive:
        messages.error(request, f"Key {old.prefix}… is revoked, expired or already rotated.")
        return redirect("dashboard:agent", workspace.slug, agent.public_id)
    keep_for_display(request, _key_slot(key), raw, rotated_from=old.pk, grace_label=label)
    return see_other("dashboard:agent_key_new", workspace.slug, agent.public_id, key.prefix)
