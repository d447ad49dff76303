"""Senders' HTML made safe to show: what the API serves as a message's `html` and the dashboard renders.

An allowlist (nh3) keeps formatting only: nothing runs, nothing loads from the sender's server (images
only from inside the message, no CSS), nothing is left for the dashboard to act on (no `id`, `class`,
`style`, `data-*` or `hx-*`); links keep http(s) and mailto targets and open in a new tab, without an
opener or a referrer.

Design: docs/architecture.md, "Senders' HTML".
"""

from __future__ import annotations

import nh3

ALLOWED_TAGS = frozenset(
    {
        "a", "abbr", "b", "blockquote", "br", "caption", "center", "cite", "code", "col", "colgroup",
        "dd", "del", "div", "dl", "dt", "em", "font", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i",
        "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "small", "span", "strike",
        "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul",
    }
)  # fmt: skip

ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "img": {"src", "alt", "title", "width", "height"},
    "ol": {"start"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan"},
}

# Removed together with everything inside them (other disallowed tags are unwrapped, keeping their
# text): their content is code, styling or a document title, never part of what the sender wrote.
DROPPED_WITH_CONTENT = frozenset(
    {"script", "style", "title", "head", "noscript", "template", "iframe", "object", "svg", "math"}
)

LINK_SCHEMES = ("http://", "https://", "mailto:")
# Pictures carried inside the message itself; anything else would be fetched from somewhere.
INLINE_IMAGE_PREFIX = "data:image/"


def _keep_attribute(tag: str, attribute: str, value: str) -> str | None:
    """nh3 has already removed disallowed schemes; this narrows URLs per tag (None drops it)."""
    if tag == "a" and attribute == "href":
        return value if value.strip().lower().startswith(LINK_SCHEMES) else None
    if tag == "img" and attribute == "src":
        # Relative, protocol-relative, http(s) and cid: sources all drop: the picture shows its alt text.
        return value if value.strip().lower().startswith(INLINE_IMAGE_PREFIX) else None
    return value


def sanitize_html(html: str) -> str:
    """`html` with only safe formatting left; "" for "" (a message without an HTML part)."""
    if not html:
        return ""
    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        clean_content_tags=set(DROPPED_WITH_CONTENT),
        attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
        attribute_filter=_keep_attribute,
        strip_comments=True,
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        url_schemes={"http", "https", "mailto", "data"},
    ).strip()
