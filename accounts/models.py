"""People who use the dashboard. Django's User (username = email) plus what this product needs:
workspace memberships with a role, invitations to join, passkeys (WebAuthn credentials) and single-use
magic links."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from accounts.roles import Permission, Role, role_may
from workspaces.models import Workspace

__all__ = ["Invitation", "MagicLink", "Membership", "Passkey", "Permission", "Profile", "Role"]

# A role column holds one of the roles the permission table knows (accounts.roles): a row with any other
# value would grant nothing and show as nonsense on the team page.
_KNOWN_ROLE = Q(role__in=Role.values)


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "workspace"], name="membership_unique"),
            models.CheckConstraint(condition=_KNOWN_ROLE, name="membership_role_known"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace.slug} ({self.role})"

    def may(self, permission: Permission) -> bool:
        return role_may(self.role, permission)


class Invitation(models.Model):
    """An invitation to join a workspace with a role, emailed as a magic link. Pending until the link's
    first use accepts it (creating the person's account if they have none) or an owner revokes it."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices)
    invited_by_email = models.EmailField()  # kept as text: the inviter may leave the workspace later
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField()  # the latest link's; a resend moves it
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Inviting an address that already has a pending invitation is a resend, never a second row:
            # the pending list shows one row per address, and one revoke withdraws every link sent to it.
            models.UniqueConstraint(
                fields=["workspace", "email"],
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_one_pending_per_address",
            ),
            models.CheckConstraint(
                condition=Q(accepted_at__isnull=True) | Q(revoked_at__isnull=True),
                name="invitation_accepted_or_revoked_not_both",
            ),
            models.CheckConstraint(condition=_KNOWN_ROLE, name="invitation_role_known"),
        ]

    def __str__(self) -> str:
        return f"invitation of {self.email} to {self.workspace.slug} ({self.role})"

    @property
    def is_pending(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None


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


class Profile(models.Model):
    """What belongs to the person rather than to a workspace: the time zone their browser reports, so
    the moments the dashboard and emails show read in it (accounts.time_zones)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    time_zone = models.CharField(max_length=64, blank=True)  # an IANA name; blank until a browser told it

    def __str__(self) -> str:
        return f"{self.user}'s profile"


class MagicLink(models.Model):
    """A single-use sign-in link. Only a hash of its token is stored. A link sent with an invitation
    also accepts it, and may sign in an address that has no account yet."""

    email = models.EmailField()
    invitation = models.ForeignKey(
        Invitation, null=True, blank=True, on_delete=models.CASCADE, related_name="links"
    )
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
