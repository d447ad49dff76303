"""Template helpers: JSON evidence rendered readably and safely (agent-written, so untrusted), and moments
in the viewer's own time zone."""

from __future__ import annotations

import json
import re
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from agentcal.clock import isoformat_z
from agentcal.moments import STYLES, age_text, moment_text, utc_text

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
    return age_text(value, timezone.now())


@register.simple_tag(takes_context=True)
def moment(context: template.Context, value: Any, style: str = "datetime") -> SafeString:
    """A moment of someone's action, for the person viewing: `<time>` in their own zone, named, with the
    exact UTC time on hover (agentcal.moments holds the wording). `style` is one of moments.STYLES, or
    "age" for "3m ago" (the hover then gives the local time too)."""
    if value is None:
        return mark_safe("")  # noqa: S308 — empty
    zone = context.get("viewer_zone") or getattr(context.get("request"), "viewer_zone", None)
    if style == "age":
        text, title = age_text(value, timezone.now()), f"{moment_text(value, zone)} · {utc_text(value)}"
    else:
        if style not in STYLES:
            raise template.TemplateSyntaxError(f"moment: unknown style {style!r}")
        text, title = moment_text(value, zone, style), utc_text(value)
    exact = isoformat_z(value)
    return format_html('<time datetime="{}" title="{}" data-moment>{}</time>', exact, title, text)
