"""Agent-written evidence as a tree the template `dashboard/approvals/_evidence.html` draws as nested
lists: objects as term/value lists in the agent's key order, arrays as lists, long text folded. The
template escapes every piece of text; nothing the agent wrote becomes markup."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Beyond these, text folds and long lists or deep nesting defer to the raw JSON.
LONG_TEXT_CHARS = 280
LONG_TEXT_LINES = 6
PREVIEW_CHARS = 140
MAX_ITEMS_SHOWN = 100
MAX_DEPTH_SHOWN = 8
MAX_NODES_SHOWN = 2000
RAW_SNIPPET_CHARS = 300


@dataclass
class EvidenceNode:
    """One value. `kind` names the template's partial that draws it: object, list, text, long_text,
    literal (true, false, null), number, empty (an empty object, list or text), raw (a JSON snippet where
    the tree stops)."""

    kind: str
    text: str = ""  # the text, number, literal's word, snippet, or what an empty value reads as
    title: str = ""  # a literal's tooltip
    preview: str = ""  # long text: its folded first words
    size: str = ""  # long text: its length in characters
    pairs: list[tuple[str, EvidenceNode]] = field(default_factory=list)  # object: key, value
    items: list[EvidenceNode] = field(default_factory=list)  # list
    left_out: int = 0  # object or list: entries beyond MAX_ITEMS_SHOWN


def evidence_tree(value: Any) -> EvidenceNode:
    """Past MAX_DEPTH_SHOWN levels, MAX_ITEMS_SHOWN items or MAX_NODES_SHOWN values in all, the rest shows
    as a JSON snippet (the raw JSON is one click away)."""
    return _node(value, 0, [MAX_NODES_SHOWN])


def _node(value: Any, depth: int, budget: list[int]) -> EvidenceNode:
    budget[0] -= 1
    if isinstance(value, (dict, list)) and value and (depth >= MAX_DEPTH_SHOWN or budget[0] <= 0):
        snippet = json.dumps(value, ensure_ascii=False)
        if len(snippet) > RAW_SNIPPET_CHARS:
            snippet = snippet[:RAW_SNIPPET_CHARS] + "…"
        return EvidenceNode("raw", text=snippet)
    if isinstance(value, dict):
        if not value:
            return EvidenceNode("empty", text="(empty)")
        shown = list(value.items())[:MAX_ITEMS_SHOWN]
        pairs = [(key or "(empty key)", _node(item, depth + 1, budget)) for key, item in shown]
        return EvidenceNode("object", pairs=pairs, left_out=len(value) - len(shown))
    if isinstance(value, list):
        if not value:
            return EvidenceNode("empty", text="(none)")
        shown_items = value[:MAX_ITEMS_SHOWN]
        items = [_node(item, depth + 1, budget) for item in shown_items]
        return EvidenceNode("list", items=items, left_out=len(value) - len(shown_items))
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, bool):
        return EvidenceNode("literal", text="yes" if value else "no", title=str(value).lower())
    if value is None:
        return EvidenceNode("literal", text="—", title="null: no value")
    return EvidenceNode("number", text=json.dumps(value))


def _text(text: str) -> EvidenceNode:
    if not text:
        return EvidenceNode("empty", text="(empty text)")
    if len(text) <= LONG_TEXT_CHARS and text.count("\n") < LONG_TEXT_LINES:
        return EvidenceNode("text", text=text)
    preview = " ".join(text[: PREVIEW_CHARS * 2].split())[:PREVIEW_CHARS]
    return EvidenceNode("long_text", text=text, preview=preview, size=f"{len(text):,}")


def raw_json(value: Any) -> str:
    """Pretty JSON in the agent's key order (escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False)
