"""People who use the dashboard. Django's User (username = email) plus what this product needs:
workspace memberships with a role, passkeys (WebAuthn credentials) and single-use magic links."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from workspaces.models import Workspace


class Role(models.TextChoices):
    OWNER = "owner"  # manages everything, receives approval notifications
    ADMIN = "admin"  # manages agents, keys and webhooks
    MEMBER = "member"  # decides approvals and reads


MANAGING_ROLES = (Role.OWNER, Role.ADMIN)


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "workspace"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace.slug} ({self.role})"

    @property
    def can_manage(self) -> bool:
        return self.role in MANAGING_ROLES


class Passkey(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys")
    name = models.CharField(max_length=100)
    credential_id = models.BinaryField(unique=True)
    public_key = models.BinaryField()
    sign_count = models.BigIntegerField(default=0)
    transports = models.JSONField(default=list)
    backed_up = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user}: {self.name}"


class MagicLink(models.Model):
    """A single-use sign-in link. Only a hash of its token is stored."""

    email = models.EmailField()
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    requested_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["email", "created_at"], name="magiclink_email_recent"),
            models.Index(fields=["requested_ip", "created_at"], name="magiclink_ip_recent"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("created_at")), name="magiclink_expiry"
            )
        ]

    def __str__(self) -> str:
        return f"magic link for {self.email}"
