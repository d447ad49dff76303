from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts.models import Membership


@login_required
def home(request: HttpRequest) -> HttpResponse:
    membership = (
        Membership.objects.select_related("workspace").filter(user=request.user.pk).order_by("id").first()
    )
    if membership is None:
        return render(request, "dashboard/no_workspace.html")
    return redirect("dashboard:approvals", membership.workspace.slug)
