"""Template helpers: JSON evidence rendered readably and safely (agent-written, so untrusted)."""

from __future__ import annotations

import json
import re
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# Tokens of pretty-printed JSON: strings (keys when followed by a colon), numbers, literals.
_TOKEN = re.compile(r'("(?:\\.|[^"\\])*")(\s*:)?|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|\b(true|false|null)\b')


@register.filter
def json_highlight(value: Any) -> SafeString:
    """Pretty JSON with <span> classes. Every piece of text is HTML-escaped before any markup is
    added, so evidence like "<script>" renders as text."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    out: list[str] = []
    position = 0
    for match in _TOKEN.finditer(text):
        out.append(escape(text[position : match.start()]))
        string, colon, number, literal = match.groups()
        if string is not None:
            css = "j-key" if colon else "j-str"
            out.append(f'<span class="{css}">{escape(string)}</span>{escape(colon or "")}')
        elif number is not None:
            out.append(f'<span class="j-num">{escape(number)}</span>')
        else:
            out.append(f'<span class="j-lit">{escape(literal)}</span>')
        position = match.end()
    out.append(escape(text[position:]))
    return mark_safe("".join(out))  # noqa: S308 — built from escaped pieces only


@register.filter
def age(value: Any) -> str:
    """A compact "3m ago" for a datetime."""
    from django.utils import timezone

    seconds = int((timezone.now() - value).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86400:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"
