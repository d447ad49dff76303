"""The one error type every upstream provider raises, and its kinds by meaning (not by provider).

A client maps each answer to one kind (the mapping is per protocol: a 403 is throttling at Google, a
refused account at a CalDAV server); the sync decides from the kind, `permanent` and `retry_after`.
"""

from __future__ import annotations


class UpstreamError(Exception):
    """Any failure talking to an upstream calendar or its token endpoint. The message names the operation
    and the URL path, never a password, token, code or client secret. `status`: the HTTP status, if an
    answer came; `reason`: the provider's machine-readable reason or error code, if it gave one;
    `retry_after`: the server's wish in seconds, None if it did not say; `permanent`: retrying cannot
    help, only a person connecting the calendar again can."""

    permanent = False

    def __init__(
        self, message: str, *, status: int | None = None, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class GrantRevoked(UpstreamError):
    """The provider refused the refresh token (revoked, expired, password changed), or none was granted:
    only a new consent brings the connection back."""

    permanent = True


class Unauthorized(UpstreamError):
    """401 on an API call: the access token expired or is not valid (anymore); refresh it and try again."""


class AuthFailed(UpstreamError):
    """A CalDAV server refused the credentials (401), or refused this account the calendar (403)."""


class NotACalendar(UpstreamError):
    """The CalDAV URL does not name a calendar collection (anymore)."""


class Throttled(UpstreamError):
    """The provider asks us to slow down (Google: 429, or a 403 whose reason is a usage limit; Graph: 429,
    or 503 with Retry-After): a pause, not a failure."""


class SyncTokenRefused(UpstreamError):
    """The change marker (CalDAV sync token, Google sync token, Graph delta link) was refused: forget it
    and everything learned with it, and list in full."""


class Conflict(UpstreamError):
    """Google's 409: an event with this client-supplied id exists (also after it was deleted: ids are
    never reused)."""


class PreconditionFailed(UpstreamError):
    """A conditional write lost: the resource exists (create-only) or changed since the version sent
    with If-Match (412)."""


class NotFound(UpstreamError):
    """The calendar, event, channel or subscription is unknown, or was deleted (404; Google's 410 outside
    sync)."""


class Unavailable(UpstreamError):
    """Worth retrying later: a network error, a timeout, 408 or 5xx (and a CalDAV server's 429)."""
