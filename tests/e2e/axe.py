"""axe-core in the browser tests: inject the vendored copy into a page, run it, return what it found.

The copy lives in tests/e2e/vendor (axe.min.js with its licence files; `npm pack axe-core` to update),
so the tests need no network. It goes in through DevTools (`page.evaluate`), which the page's
Content-Security-Policy does not govern, so checking a page never weakens the policy being checked.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

AXE_SOURCE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
SERIOUS = ("serious", "critical")

# The WCAG 2.x A and AA rules plus axe's best practices (landmarks, heading order, skip links...).
RUN_OPTIONS = {
    "runOnly": {
        "type": "tag",
        "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"],
    },
    "resultTypes": ["violations"],
}


@cache
def _axe_source() -> str:
    return AXE_SOURCE.read_text()


def axe_violations(page: Any, *, impacts: tuple[str, ...] = SERIOUS) -> list[dict[str, Any]]:
    """The axe violations on the page as it is now, of the given impacts (serious and critical by default)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(_axe_source())
    violations: list[dict[str, Any]] = page.evaluate(
        "async (options) => (await window.axe.run(document, options)).violations", RUN_OPTIONS
    )
    return [violation for violation in violations if violation["impact"] in impacts]


def describe(violations: list[dict[str, Any]]) -> str:
    """One line per rule and offending element, for an assertion message a person can act on."""
    lines = []
    for violation in violations:
        lines.append(f"  {violation['impact']}: {violation['id']} — {violation['help']}")
        for node in violation["nodes"][:5]:
            summary = " ".join((node.get("failureSummary") or "").split())
            lines.append(f"      {' '.join(node['target'])}: {summary[:240]}")
        if len(violation["nodes"]) > 5:
            lines.append(f"      … and {len(violation['nodes']) - 5} more")
    return "\n".join(lines)
