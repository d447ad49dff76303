"""Reading mail is pure: the iCalendar, sender authentication, parsing and bounce modules import no
database code and no app module that does, so they can be read and tested as functions of the bytes."""

from __future__ import annotations

import ast

from inboxes import ical
from inboxes.models import PartStat
from tests.test_architecture import ROOT

PURE = ("ical", "sender_auth", "parsing", "bounces")


def _runtime_imports(module: str) -> set[str]:
    tree = ast.parse((ROOT / "inboxes" / f"{module}.py").read_text())
    typing_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for node in ast.walk(branch)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_mail_reading_modules_import_no_database_code() -> None:
    for module in PURE:
        imports = _runtime_imports(module)
        assert not {i for i in imports if i.startswith("django.db")}, module
        inboxes_imports = {i.removeprefix("inboxes.") for i in imports if i.startswith("inboxes.")}
        assert inboxes_imports <= set(PURE), (module, inboxes_imports)


def test_an_attendee_without_partstat_reads_as_needs_action() -> None:
    assert ical.DEFAULT_PARTSTAT == PartStat.NEEDS_ACTION
    invite = ical.invite_read(
        [
            b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nMETHOD:REQUEST\r\nBEGIN:VEVENT\r\nUID:u1@example.com\r\n"
            b"DTSTART:20261201T090000Z\r\nDTEND:20261201T100000Z\r\nATTENDEE:mailto:Bob@Example.com\r\n"
            b"END:VEVENT\r\nEND:VCALENDAR\r\n"
        ]
    )
    assert invite is not None and not invite.problem
    assert invite.attendees == [{"email": "bob@example.com", "name": "", "status": "needs-action"}]
