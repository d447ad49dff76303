"""Typed readers for settings from the environment; a bad value fails loudly at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """Read NAME, or the contents of the file named by NAME_FILE (for secrets mounted as files)."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, *, schemes: tuple[str, ...]) -> str | None:
    raw = env_str(name)
    if not raw:
        return None
    scheme = urlparse(raw).scheme
    if scheme not in schemes:
        raise ImproperlyConfigured(f"{name} must use one of {', '.join(schemes)}; got {scheme!r}")
    return raw


@dataclass(frozen=True)
class EmailRelay:
    host: str
    port: int
    user: str
    password: str
    starttls: bool
    ssl: bool


def email_url_settings(url: str) -> EmailRelay:
    """EMAIL_URL: `smtp://user:password@host:port?tls=1` (STARTTLS) or `smtps://…` (TLS from the start).
    User and password are percent-decoded, so either may contain `@` or `:` written as %40 / %3A."""
    parsed = urlparse(url)
    if parsed.scheme not in ("smtp", "smtps") or not parsed.hostname:
        raise ImproperlyConfigured(
            f"EMAIL_URL must be smtp://host[:port] or smtps://host[:port]; got {url!r}"
        )
    ssl = parsed.scheme == "smtps"
    query = parse_qs(parsed.query)
    starttls = not ssl and query.get("tls", ["0"])[-1].lower() in ("1", "true", "yes")
    try:
        port = parsed.port or (465 if ssl else 587 if starttls else 25)
    except ValueError as exc:
        raise ImproperlyConfigured(f"EMAIL_URL has an invalid port: {exc}") from exc
    return EmailRelay(
        host=parsed.hostname,
        port=port,
        user=unquote(parsed.username or ""),
        password=unquote(parsed.password or ""),
        starttls=starttls,
        ssl=ssl,
    )
