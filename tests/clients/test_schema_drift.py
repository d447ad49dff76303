"""The client's models and errors cannot drift from the server: each model matches its component of the
server's OpenAPI schema field for field (none missing, none invented, optional exactly where the schema
allows absence or null, types alike), and every problem code the server can answer maps to its client
error class."""

from __future__ import annotations

import ast
import dataclasses
import sys
import types
from datetime import datetime
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import agentcal_client
import pytest
from agentcal_client import models, problems
from agentcal_client.models import _field_types
from drf_spectacular.generators import SchemaGenerator

# Each model and the schema component it mirrors.
COMPONENTS: dict[type[models.Model], str] = {
    models.Calendar: "CalendarOutput",
    models.Availability: "AvailabilityOutput",
    models.BusySpan: "BusyOutput",
    models.Slot: "FreeSlotOutput",
    models.Hold: "HoldOutput",
    models.FoundHold: "FoundHoldOutput",
    models.Booking: "BookingOutput",
    models.CalendarShare: "CalendarShareOutput",
    models.Displaced: "DisplacedOutput",
    models.Approval: "ApprovalOutput",
    models.Identity: "MeOutput",
    models.IdentityAgent: "MeAgentOutput",
    models.IdentityWorkspace: "MeWorkspaceOutput",
    models.IdentityKey: "MeKeyOutput",
    models.IdentityLimits: "MeLimitsOutput",
    models.IdentityPause: "MePausedOutput",
    models.Inbox: "InboxOutput",
    models.Quota: "QuotaOutput",
    models.Thread: "ThreadOutput",
    models.ThreadDetail: "ThreadDetailOutput",
    models.Message: "MessageOutput",
    models.Address: "AddressOutput",
    models.Attachment: "AttachmentOutput",
    models.AuthResults: "AuthResultsOutput",
    models.CalendarEvent: "CalendarEventOutput",
    models.InvitePerson: "InvitePersonOutput",
    models.InviteAttendee: "InviteAttendeeOutput",
    models.QueuedMessage: "QueuedOutput",
    models.AuditRecord: "AuditRecordOutput",
    models.MeetingTimes: "AvailabilitySearchOutput",
    models.MeetingCandidate: "CandidateOutput",
    models.SearchedWindow: "SearchedOutput",
}
SCALARS = {"string": str, "integer": int, "boolean": bool, "number": float}


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return schema["components"]["schemas"]


def test_every_model_is_checked() -> None:
    exported = {getattr(models, name) for name in models.__all__}
    dataclass_models = {m for m in exported if isinstance(m, type) and issubclass(m, models.Model)}
    assert dataclass_models == set(COMPONENTS)


@pytest.mark.parametrize("model", list(COMPONENTS), ids=lambda m: m.__name__)
def test_model_fields_match_the_schema(model: type[models.Model], components: dict[str, Any]) -> None:
    component = components[COMPONENTS[model]]
    properties: dict[str, Any] = component["properties"]
    required = set(component.get("required", []))
    fields = {model.json_names.get(f.name, f.name): f for f in dataclasses.fields(model)}  # type: ignore[arg-type]
    types_ = _field_types(model)

    assert sorted(fields) == sorted(properties), "fields missing from or invented beyond the schema"
    for json_name, field in fields.items():
        spec, nullable = _without_null(properties[json_name])
        annotation = types_[field.name]
        may_be_absent = json_name not in required or nullable
        if not {"type", "$ref", "allOf", "oneOf", "anyOf"} & set(spec):
            # Any JSON value, null among them: the client may type it optional or not.
            may_be_absent = may_be_absent or _is_optional(annotation)
        assert _is_optional(annotation) == may_be_absent, f"{json_name}: optional/nullable differs"
        if may_be_absent:
            assert field.default is None, f"{json_name}: an optional field defaults to None"
        else:
            assert field.default is dataclasses.MISSING, f"{json_name}: a required field has no default"
        _assert_type(_strip_optional(annotation), spec, components, where=f"{model.__name__}.{json_name}")


def test_pages_match_the_schema(components: dict[str, Any]) -> None:
    page_fields = {f.name for f in dataclasses.fields(models.Page)}
    pages = [name for name in components if name.endswith("Page")]
    assert pages
    for name in pages:
        assert set(components[name]["properties"]) == page_fields, name


def _assert_type(annotation: Any, spec: dict[str, Any], components: dict[str, Any], *, where: str) -> None:
    ref = _ref(spec)
    if ref is not None:
        target = components[ref]
        if "enum" in target:  # an enum of strings
            assert annotation is str, f"{where}: {ref} is a string enum"
            return
        assert isinstance(annotation, type) and issubclass(annotation, models.Model), where
        assert COMPONENTS[annotation] == ref, f"{where}: {annotation.__name__} is not {ref}"
        return
    kind = spec.get("type")
    if kind is None:  # any JSON value
        assert annotation is Any, f"{where}: the schema allows any JSON here"
        return
    if kind == "array":
        assert get_origin(annotation) is tuple, f"{where}: arrays are tuples"
        item, _ = _without_null(spec["items"])
        _assert_type(get_args(annotation)[0], item, components, where=f"{where}[]")
    elif kind == "object":
        assert get_origin(annotation) is dict or annotation is Any, where
    elif spec.get("format") == "date-time":
        assert annotation is datetime, f"{where}: date-times are datetimes"
    else:
        assert annotation is SCALARS[kind], f"{where}: {kind} is not {annotation}"


def _without_null(spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema of the value when it is not null (OpenAPI 3.1: `type: [T, "null"]`, or a oneOf with a null
    branch), and whether null is allowed."""
    kind = spec.get("type")
    if isinstance(kind, list) and "null" in kind:
        (rest,) = [k for k in kind if k != "null"]
        return {**spec, "type": rest}, True
    branches = spec.get("oneOf")
    if branches:
        nulls = [b for b in branches if b.get("type") == "null" or b.get("$ref", "").endswith("/NullEnum")]
        if nulls:
            (rest,) = [b for b in branches if b not in nulls]
            return {**{k: v for k, v in spec.items() if k != "oneOf"}, **rest}, True
    return spec, False


def _ref(spec: dict[str, Any]) -> str | None:
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[-1]
    all_of = spec.get("allOf")
    if all_of and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


def _is_optional(annotation: Any) -> bool:
    if annotation is Any:
        return False
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


def _strip_optional(annotation: Any) -> Any:
    if not _is_optional(annotation):
        return annotation
    (inner,) = [arg for arg in get_args(annotation) if arg is not type(None)]
    return inner


# --- Errors -------------------------------------------------------------------------------------------------


def _server_errors() -> list[type[Any]]:
    import inboxes.inbound_webhook  # noqa: F401 — defines problems of its own
    import inboxes.mail_settings  # noqa: F401
    from agentcal.errors import AgentCalError

    found: list[type[Any]] = []
    pending = list(AgentCalError.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if "code" in vars(cls) or "status" in vars(cls)]


def test_every_server_problem_maps_to_a_client_error_of_its_status_family() -> None:
    for server_error in _server_errors():
        status, code = server_error.status, server_error.code
        client_class = problems.error_class_for(status, code)
        assert client_class.__doc__, client_class
        expected_family = problems.error_class_for(status, None)
        assert issubclass(client_class, expected_family), (code, client_class, expected_family)


def test_every_code_the_client_names_is_one_the_server_answers() -> None:
    server_codes = {cls.code for cls in _server_errors()} | {"forbidden", "rate_limited"}
    client_codes = set(problems._BY_CODE)
    assert client_codes <= server_codes, client_codes - server_codes


def test_agent_facing_problems_have_their_own_class() -> None:
    from agentcal import errors as server

    for server_error in (
        server.SlotConflict,
        server.HoldExpired,
        server.HoldEvicted,
        server.StaleFencingToken,
        server.PreconditionFailed,
        server.NotOwner,
        server.QuotaExceeded,
        server.ServiceUnavailable,
        server.NotFound,
        server.InsufficientScope,
        server.InvalidRequest,
        server.BookingTooLong,
        server.ApprovalExists,
        server.IdempotencyKeyReused,
        server.OutsideWorkingHours,
        server.InsufficientNotice,
        server.NoSlotFound,
    ):
        client_class = problems.error_class_for(server_error.status, server_error.code)
        assert client_class.default_code == server_error.code
        assert client_class.__name__ in agentcal_client.__all__


# --- Standing alone ---------------------------------------------------------------------------------------


def test_the_client_depends_only_on_httpx_and_the_standard_library() -> None:
    package = Path(agentcal_client.__file__).parent
    allowed = set(sys.stdlib_module_names) | {"httpx", "agentcal_client"}
    for source in package.rglob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{source.name} imports {name}"
