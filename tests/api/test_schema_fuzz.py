"""Schema fuzzing: every operation of the published OpenAPI document, against the real server.

Schemathesis generates requests from `GET /v1/schema` (examples, coverage, fuzzing and stateful
phases; positive and negative data) and checks every response against the same document: no 5xx, only
documented status codes and content types, bodies and headers that match their schemas, invalid input
refused, valid input accepted, auth enforced, deleted resources gone. The server is the application
under gunicorn, as in production (two workers, persistent database connections), on the real PostgreSQL
test database; the client is an agent with every scope.

Why the `schemathesis run` CLI in a subprocess, not `@schema.parametrize()` + `case.call_and_validate()`:

- Generating the data (hypothesis-jsonschema) costs about as much CPU as serving it; in a process of its
  own it shares the machine's two cores with the gunicorn workers instead of one interpreter's GIL.
- The CLI engine runs each phase of each operation to its end (`--continue-on-failure`) and records every
  failing check of every case in a structured NDJSON report, so one run lists all the distinct problems.
  Under pytest the coverage phase's cases are Hypothesis `@example`s: one failing example ends the
  operation before its fuzzing phase runs, and a known schema gap would hide everything behind it.
- The assertion message is built from that NDJSON report: operation, check, failure, status and the
  request that reproduces it, grouped, with the full console output saved next to it.

Determinism: a fixed seed plus Hypothesis' derandomized mode, one worker (a fixed operation order), and a
throw-away working directory and config file, so no example database or Schemathesis cache carries over
from another run. The server still mints random ids, so the *values* of the requests that reuse them vary
from run to run; what is generated, and so what is found, does not.

Realistic paths: random ids only ever reach the 404 branch, so the fixture creates a calendar, a hold, a
booking, an approval, a webhook endpoint and a delivery through the API, and their ids (and the hold's
token) become `example` values of the parameters and string body properties of the same name in the
fetched document. Examples change no contract: every type, constraint and response stays as published.
The examples and coverage phases then start from real objects (and mutate them), the stateful phase
follows links from what it creates, and fuzzing still draws ids at random.

Budget: 70-85 s here on 2 busy cores (MAX_EXAMPLES fuzzed cases per operation on top of the coverage
phase's fixed set). The test is expected to fail until the API and its schema agree.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import Persona, slot

pytest.importorskip("schemathesis", reason="schemathesis is not installed: pip install -e '.[dev]'")

SEED = 42
# Fuzzing-phase cases per operation; the coverage phase adds its own fixed set. A deeper run, by hand:
#   AGENTCAL_FUZZ_MAX_EXAMPLES=100 AGENTCAL_FUZZ_TIMEOUT=1500 \
#   .venv/bin/python -m pytest tests/api/test_schema_fuzz.py -o timeout=1800
MAX_EXAMPLES = int(os.environ.get("AGENTCAL_FUZZ_MAX_EXAMPLES", "10"))
# The stateful phase chains calls along inferred links (create, then read/delete what was created): the
# only phase that runs the use_after_free and ensure_resource_availability checks.
PHASES = os.environ.get("AGENTCAL_FUZZ_PHASES", "examples,coverage,fuzzing,stateful")
CHECKS = "all"
WORKERS = 1  # one worker keeps the order of operations, and so the run, reproducible
# A hard stop well above the budget: a hung run must fail, not block the suite. The run takes 75-140 s on
# this 2-core machine, and once more than 240 s beside the other test workers on a slow afternoon.
RUN_TIMEOUT_S = int(os.environ.get("AGENTCAL_FUZZ_TIMEOUT", "480"))
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}

# Schemathesis' own config, written for each run: no cache of earlier runs, fill in what examples lack.
# Error feedback (learning constraints from 4xx bodies) is off: its DRF parser walks the whole problem
# document, so `{"errors": {"evidence": [...]}}` teaches it a body property named `errors`, and the
# "valid" requests it then builds are refused as unknown fields: false positive_data_acceptance failures.
SCHEMATHESIS_TOML = """\
[cache]
enabled = false

[generation]
database = "none"

[phases.examples]
fill-missing = true

[phases.fuzzing.error-feedback]
enabled = false
"""
# Rules no JSON Schema can state, so a schema-valid request may still be refused by them, and that is
# right. A refusal is waived only when the server names one of these rules (the problem's `error`, and
# for invalid_request the field it blames): any other refusal of a schema-valid request still fails.
WAIVED_REFUSALS: dict[tuple[str, str | None], str] = {
    ("invalid_range", None): "end after start, not in the past, an availability window of at most 62 days",
    ("booking_too_long", None): "the calendar's own max_booking_minutes and bucket count",
    ("outside_working_hours", None): "the calendar's working hours and date overrides (set by a PATCH)",
    ("insufficient_notice", None): "the calendar's min_notice_minutes, at the database's clock",
    ("idempotency_key_reused", None): "an Idempotency-Key names one logical call: sent again with another "
    "request it is refused (the generator reuses its example keys across operations)",
    ("unsafe_webhook_url", None): "the SSRF guard resolves the URL's host when the endpoint is created",
    ("unsafe_upstream_url", None): "the SSRF guard resolves the URL's host, and upstream URLs must be https",
    ("invalid_request", "cursor"): "cursors are opaque and signed by the server",
    ("invalid_request", "event_type"): "an audit filter names an event type the server records, or a family",
    ("invalid_request", "timezone"): "a zone name must be one the server's tz database knows",
    ("invalid_request", "calendars"): "a search names each calendar once, as required or as optional",
    ("invalid_request", "min_optional"): "a search's min_optional is at most the optional calendars named",
    ("invalid_request", "working_hours"): "a day's intervals have a length, are in order and do not overlap",
    ("invalid_request", "date_overrides"): "overrides are keyed by real dates, their intervals as a day's",
    (
        "invalid_request",
        "recipients",
    ): "mail addresses must be RFC 5322 addr-specs; to and cc at most 50 together",
}
# Checks that do not apply to an operation, with the reason.
WAIVED_CHECKS: dict[tuple[str, str], str] = {
    (
        f"{method} {path}",
        "use_after_free",
    ): "soft delete by contract: it stays readable, with its final status"
    for method in ("GET", "DELETE")
    for path in ("/v1/bookings/{booking_id}", "/v1/holds/{hold_id}", "/v1/webhook-endpoints/{endpoint_id}")
} | {
    (f"POST {path}", "ensure_resource_availability"): "a 404 here may name `also_calendars` from the body "
    "(`missing_calendars`), not the calendar just created"
    for path in ("/v1/calendars/{calendar_id}/holds", "/v1/calendars/{calendar_id}/commits")
}


def waived(check: str, operation: str, body: str) -> bool:
    if (operation, check) in WAIVED_CHECKS:
        return True
    if check != "positive_data_acceptance":
        return False
    try:
        problem = json.loads(body)
    except ValueError:
        return False
    if not isinstance(problem, dict):
        return False
    error = problem.get("error")
    blamed = _blamed_fields(problem.get("errors"))
    return (error, None) in WAIVED_REFUSALS or any((error, field) in WAIVED_REFUSALS for field in blamed)


def _blamed_fields(errors: object) -> set[str]:
    """The fields a problem's `errors` blame: its keys, a nested serializer's keys (`{"search":
    {"min_optional": …}}`) and the field a path names (`working_hours.mon[0]` blames `working_hours`)."""
    if not isinstance(errors, dict):
        return set()
    blamed = set()
    for key, value in errors.items():
        blamed.add(re.split(r"[.\[]", str(key), maxsplit=1)[0])
        if isinstance(value, dict):
            blamed |= _blamed_fields(value)
    return blamed


# The coverage phase sends one request per value of every enum it meets, and has no cap: an operation
# whose body holds a long enum (the ~600 IANA time zones) costs a request per value, ~20 s each here.
# Such operations keep only the coverage phase's negative cases; their valid bodies still come from the
# examples, fuzzing and stateful phases.
LONG_ENUM = 50


@pytest.fixture
def fuzz_target(make_agent: Callable[..., Persona], settings: Any) -> dict[str, Any]:
    """An agent with every scope, and one real object of each kind for the path parameters."""
    agent = make_agent("fuzzer", priority=100, max_priority=1000)
    client = agent.client

    def created(response: httpx.Response) -> dict[str, Any]:
        assert response.status_code == 201, f"{response.request.url}: {response.text}"
        return response.json()

    # Subscribing a loopback URL needs the private-target switch; it is off again before the fuzzing.
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    subscription = {"url": "http://127.0.0.1:9/fuzz", "events": ["*"]}
    endpoint = created(client.post("/webhook-endpoints", json=subscription))
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False

    calendar = created(client.post("/calendars", json={"name": "Fuzz target", "hold_ttl_seconds": 3600}))
    hold = created(client.post(f"/calendars/{calendar['id']}/holds", json={**slot(48), "ttl_seconds": 3600}))
    booking = created(client.post(f"/calendars/{calendar['id']}/commits", json=slot(72)))
    approval = created(client.post("/approvals", json={"summary": "Fuzz approval", "evidence": {"a": 1}}))

    # Turn the events above into deliveries now (the Celery dispatcher's job; no worker runs here).
    from webhooks.outbox import outbox_dispatch

    outbox_dispatch()
    deliveries = client.get(f"/webhook-endpoints/{endpoint['id']}/deliveries")
    assert deliveries.status_code == 200, deliveries.text
    delivery_ids = [d["id"] for d in deliveries.json()["results"]]
    assert delivery_ids, "the seeded events made no webhook delivery"

    return {
        "agent": agent,
        "examples": {
            "calendar_id": calendar["id"],
            "hold_id": hold["id"],
            "hold_token": hold["hold_token"],
            "booking_id": booking["id"],
            "approval_id": approval["id"],
            "endpoint_id": endpoint["id"],
            "delivery_id": delivery_ids[0],
        },
    }


def add_examples(document: dict[str, Any], examples: dict[str, str]) -> list[str]:
    """Give parameters and body properties named like a seeded value an `example`; return what was set."""
    applied = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            for parameter in [*item.get("parameters", []), *operation.get("parameters", [])]:
                value = examples.get(parameter.get("name", ""))
                if value is not None and parameter.get("in") in ("path", "query"):
                    parameter["example"] = value
                    applied.append(f"{method.upper()} {path} {parameter['in']} {parameter['name']}")
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        for field, subschema in (schema.get("properties") or {}).items():
            if field in examples and subschema.get("type") == "string":
                subschema["example"] = examples[field]
                applied.append(f"{name}.{field}")
    return applied


def operations_with_long_enums(document: dict[str, Any]) -> list[str]:
    """Operations whose request body reaches an enum of more than LONG_ENUM values."""
    schemas = document.get("components", {}).get("schemas", {})

    def reaches_long_enum(node: Any, seen: frozenset[str] = frozenset()) -> bool:
        if isinstance(node, list):
            return any(reaches_long_enum(item, seen) for item in node)
        if not isinstance(node, dict):
            return False
        if len(node.get("enum", [])) > LONG_ENUM:
            return True
        ref = node.get("$ref", "")
        name = ref.rsplit("/", 1)[-1]
        if ref.startswith("#/components/schemas/") and name not in seen:
            return reaches_long_enum(schemas.get(name), seen | {name})
        return any(reaches_long_enum(value, seen) for value in node.values())

    return sorted(
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS and reaches_long_enum(operation.get("requestBody", {}))
    )


def negative_coverage_only(operations: list[str]) -> str:
    if not operations:
        return ""
    return (
        "\n[[operations]]\n"
        f"include-name = {json.dumps(operations)}\n"
        'phases.coverage.generation.mode = "negative"\n'
    )


@pytest.mark.fuzz
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_every_operation_honours_the_published_schema(app_server, fuzz_target, tmp_path):
    base_url = app_server
    # The published document is YAML by default; Schemathesis reads its JSON rendering (?format=json).
    default_format = httpx.get(f"{base_url}/v1/schema", timeout=30)
    assert default_format.status_code == 200, default_format.text
    response = httpx.get(f"{base_url}/v1/schema", params={"format": "json"}, timeout=30)
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["openapi"].startswith("3."), document.get("openapi")
    assert add_examples(document, fuzz_target["examples"]), "no parameter took a seeded id"

    schema_path = tmp_path / "openapi.json"
    schema_path.write_text(json.dumps(document, indent=1))
    config_path = tmp_path / "schemathesis.toml"
    config_path.write_text(SCHEMATHESIS_TOML + negative_coverage_only(operations_with_long_enums(document)))
    report_dir = tmp_path / "report"
    command = [
        sys.executable, "-m", "schemathesis.cli",
        "--config-file", str(config_path),
        "--no-color",
        "run", str(schema_path),
        "--url", base_url,  # the document's paths already start with /v1
        "--header", f"Authorization: Bearer {fuzz_target['agent'].raw_key}",
        "--checks", CHECKS,
        "--phases", PHASES,
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        "--generation-deterministic",
        # PostgreSQL cannot store U+0000 or lone surrogates: refused by rule (tests/api/test_hostile_input.py)
        "--generation-allow-x00", "false",
        "--generation-codec", "utf-8",
        "--workers", str(WORKERS),
        "--continue-on-failure",
        "--request-timeout", "20",
        # Conformance, not latency (the benchmark measures that): this runs beside three other test
        # workers, Celery and gunicorn on two cores, where schemathesis's default 10 s limit once failed
        # one answer in 2,508; a request still counts as failed past the request timeout.
        "--max-response-time", "20",
        "--report", "ndjson,junit",
        "--report-dir", str(report_dir),
        "--report-ndjson-path", str(report_dir / "events.ndjson"),
        "--report-junit-path", str(report_dir / "junit.xml"),
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if not key.startswith("SCHEMATHESIS_")}
    env["COLUMNS"] = "120"

    started = time.monotonic()
    try:
        run = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"schemathesis did not finish within {RUN_TIMEOUT_S} s; partial output:\n{partial}")
    elapsed = time.monotonic() - started
    output_path = tmp_path / "schemathesis-output.txt"
    output_path.write_text(f"{run.stdout}\n{run.stderr}")

    ndjson = report_dir / "events.ndjson"
    assert ndjson.exists(), f"no report (exit {run.returncode}):\n{run.stdout[-5000:]}\n{run.stderr}"
    summary = summarize(ndjson)
    header = (
        f"schemathesis exit {run.returncode} after {elapsed:.0f} s, seed {SEED}, "
        f"{len(summary['operations'])} scenario labels, {summary['cases']} cases; "
        f"full output: {output_path}, NDJSON: {ndjson}\n"
    )
    found = summary["failures"] or summary["errors"]
    assert run.returncode != 0 or not found, header + "schemathesis exited 0 despite failures"
    assert run.returncode in (0, 1), header + run.stdout[-5000:] + run.stderr[-3000:]
    published = {
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }
    untested = published - summary["operations"]
    assert not untested, header + f"operations never tested: {sorted(untested)}"
    if summary["errors"] or summary["failures"]:
        pytest.fail(
            header + format_errors(summary["errors"]) + format_failures(summary["failures"]), pytrace=False
        )


# --- Reading Schemathesis' NDJSON event stream ----------------------------------------------------------

FailureKey = tuple[str, str, str, int | None, str]  # operation, code, check, status, reason


def summarize(ndjson: Path) -> dict[str, Any]:
    """Every failing check of every case, grouped into distinct failures with one sample case each."""
    failures: dict[FailureKey, dict[str, Any]] = {}
    errors: list[str] = []
    operations: set[str] = set()
    cases = 0
    for line in ndjson.read_text().splitlines():
        event = json.loads(line)
        for kind in ("NonFatalError", "FatalError"):
            if kind in event:
                errors.append(f"{kind}: {json.dumps(event[kind])[:1000]}")
        finished = event.get("ScenarioFinished")
        if not finished:
            continue
        recorder = finished["recorder"]
        operations.add(recorder["label"])
        cases += len(recorder.get("cases", {}))
        for case_id, checks in recorder.get("checks", {}).items():
            interaction = recorder.get("interactions", {}).get(case_id) or {}
            response = interaction.get("response") or {}
            body = decoded_body(response)
            for check in checks:
                if check["status"] != "failure":
                    continue
                failure = check["failure_info"]["failure"]
                code = failure.get("code") or ""
                status = response.get("status_code")
                case = recorder["cases"].get(case_id, {}).get("value", {})
                operation = f"{case['method']} {case['path']}" if "path" in case else recorder["label"]
                if waived(check["name"], operation, body):
                    continue
                key = (operation, code, check["name"], status, failure_reason(code, failure, body))
                entry = failures.setdefault(
                    key,
                    {
                        "title": failure.get("title", ""),
                        "phases": set(),
                        "count": 0,
                        "case": case,
                        "request": interaction.get("request", {}),
                        "response": body,
                    },
                )
                entry["count"] += 1
                entry["phases"].add(finished.get("phase"))
    return {"failures": failures, "errors": errors, "operations": operations, "cases": cases}


def decoded_body(response: dict[str, Any]) -> str:
    content = response.get("content") or {}
    if "$base64" in content:
        return base64.b64decode(content["$base64"]).decode("utf-8", "replace")
    return str(content.get("string", ""))


def failure_reason(code: str, failure: dict[str, Any], body: str) -> str:
    """What tells one failure of a check apart from another: the refusal's messages, or the schema path."""
    message = failure.get("message") or ""
    first_line = message.splitlines()[0] if message else ""
    if code == "ST108":  # response violates schema
        where = re.search(r"Schema at (\S+):", message)
        return f"{first_line} at {where.group(1) if where else '?'}"
    if code == "ST201":  # schema-violating request accepted: say what was invalid
        invalid = re.search(r"Invalid component: (.+)", message)
        return invalid.group(1).strip() if invalid else first_line
    try:
        problem = json.loads(body)
    except ValueError:
        return first_line
    if not isinstance(problem, dict) or "error" not in problem:
        return first_line
    fields = problem.get("errors")
    texts = sorted({without_values(text) for text in leaves(fields)}) if fields else []
    return f"{problem['error']}: {'; '.join(texts) or without_values(str(problem.get('detail', '')))}"


def leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in leaves(item)]
    if isinstance(value, list):
        return [text for item in value for text in leaves(item)]
    return [str(value)]


def without_values(text: str) -> str:
    """The rule, not the values: quoted values, lists of them, ids and numbers are elided."""
    return re.sub(r"\[[^\]]*\]|'[^']*'|\b[a-z]+_[a-z0-9]{20}\b|(?<![-+:\w])\d+(?![-:\w])", "…", text)[:200]


def format_failures(failures: dict[FailureKey, dict[str, Any]]) -> str:
    lines = [f"{len(failures)} distinct failure(s):"]
    for (operation, code, check, status, reason), entry in sorted(failures.items(), key=str):
        request, case = entry["request"], entry["case"]
        method, url = request.get("method", case.get("method", "")), request.get("uri", case.get("path", ""))
        body = f" body={json.dumps(case['body'])[:300]}" if "body" in case else ""
        phases = ",".join(sorted(phase for phase in entry["phases"] if phase))
        lines += [
            f"- {operation}: {code} {entry['title']} [{check}] -> {status}: {reason}"
            f" (x{entry['count']}, {phases})",
            f"    {method} {url}{body}",
            f"    <- {entry['response'][:300]}",
        ]
    return "\n".join(lines)


def format_errors(errors: list[str]) -> str:
    if not errors:
        return ""
    return f"{len(errors)} error(s) while testing:\n" + "".join(f"- {error}\n" for error in errors)
