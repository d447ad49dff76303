"""What the report says about the runaway scenario (bench.runaway): a summary per kind of web worker, its
goals (read met or missed like the others) and its Markdown section."""

from __future__ import annotations

from typing import Any

from bench.config import RUNAWAY_CALM, RUNAWAY_FLOOD, RUNAWAY_LIMITS_OFF
from bench.formatting import fmt_ms, fmt_ratio, num
from bench.stats import ScenarioResult, ratio, worker_kind

FLOODED_P99_GOAL = 1.5  # the well-behaved agents' p99 beside the flood, over their p99 alone
FLOODED_THROUGHPUT_GOAL = 0.8  # their writes/s beside the flood, over alone
RATE_CHECK_COST_GOAL = 0.95  # writes/s with the per-agent request-rate check on, over off


def _run(results: list[ScenarioResult], scenario: str, variant: str, threads: int) -> ScenarioResult | None:
    return next(
        (
            r
            for r in results
            if (r.scenario, r.variant, r.extra.get("worker_threads")) == (scenario, variant, threads)
        ),
        None,
    )


def runaway_summary(results: list[ScenarioResult]) -> dict[str, Any] | None:
    """Per kind of web worker: the well-behaved agents alone and beside the flood, and the flood's answers;
    then the rate check's cost (writes/s on over off, on the kind it was measured with)."""
    kinds = [
        r.extra["worker_threads"] for r in results if r.scenario == RUNAWAY_FLOOD and r.variant == "engine"
    ]
    if not kinds:
        return None
    runs = []
    for threads in kinds:
        alone = _run(results, RUNAWAY_CALM, "engine", threads)
        beside = _run(results, RUNAWAY_FLOOD, "engine", threads)
        flood = _run(results, RUNAWAY_FLOOD, "flood", threads)
        assert alone is not None and beside is not None and flood is not None
        limits = flood.extra["flood_limits"]
        # At most what a full bucket holds, and what refills while the flood lasts.
        budget = limits["request_burst"] + limits["requests_per_second"] * flood.wall_seconds
        counts = [r.double_bookings for r in (alone, beside, flood)]
        runs.append(
            {
                "worker_threads": threads,
                "workers": worker_kind(threads),
                "alone_writes_per_second": _writes_per_second(alone),
                "beside_flood_writes_per_second": _writes_per_second(beside),
                "throughput_ratio": ratio(_writes_per_second(beside), _writes_per_second(alone)),
                "alone_p99_ms": alone.latency()["p99"],
                "beside_flood_p99_ms": beside.latency()["p99"],
                "p99_ratio": ratio(beside.latency()["p99"], alone.latency()["p99"]),
                "well_behaved_errors": alone.errors + beside.errors,
                "alone_web_cpu_ms_per_write": alone.extra.get("web_cpu_ms_per_write"),
                "beside_flood_web_cpu_ms_per_write": beside.extra.get("web_cpu_ms_per_write"),
                "flood_threads": flood.extra["threads"],
                "flood_limits": limits,
                "flood_seconds": flood.wall_seconds,
                "flood_requests": flood.attempts,
                "flood_accepted": flood.successes,
                "flood_requests_per_second": flood.ops_per_second,
                "flood_accepted_per_second": ratio(flood.successes, flood.wall_seconds),
                "flood_budget": budget,
                "flood_answers": _answers(flood),
                "double_bookings": None if None in counts else sum(c or 0 for c in counts),
            }
        )
    off = next((r for r in results if r.scenario == RUNAWAY_LIMITS_OFF), None)
    on = None if off is None else _run(results, RUNAWAY_CALM, "engine", off.extra["worker_threads"])
    cost = None
    if on is not None and off is not None:
        cost = {
            "workers": worker_kind(on.extra["worker_threads"]),
            "on_writes_per_second": _writes_per_second(on),
            "off_writes_per_second": _writes_per_second(off),
            "ratio": ratio(_writes_per_second(on), _writes_per_second(off)),
            "on_p99_ms": on.latency()["p99"],
            "off_p99_ms": off.latency()["p99"],
            "on_web_cpu_ms_per_write": on.extra.get("web_cpu_ms_per_write"),
            "off_web_cpu_ms_per_write": off.extra.get("web_cpu_ms_per_write"),
            "errors": on.errors + off.errors,
        }
    return {"runs": runs, "rate_check_cost": cost}


def _writes_per_second(result: ScenarioResult) -> float | None:
    """Writes that succeeded, per second: a refused request is cheap and must not count as throughput."""
    return ratio(result.successes, result.wall_seconds)


def _answers(flood: ScenarioResult) -> dict[str, int]:
    """The flood's answers by status and error: `201 hold`, `429 rate_limited:requests`, …"""
    counts: dict[str, int] = {}
    for outcome in flood.outcomes:
        name = f"{outcome.status} {outcome.code or outcome.op}"
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def _row(goal: str, target: str, measured: str, verdict: bool | None, why: str = "") -> dict[str, Any]:
    return {
        "goal": goal,
        "target": target,
        "measured": measured,
        "met": verdict,
        "why": why if verdict is False else "",
    }


def _flood_said(run: dict[str, Any]) -> str:
    limits = run["flood_limits"]
    budget = (
        f"its budget {num(limits['requests_per_second'], 0)}/s, burst {limits['request_burst']}: at most "
        f"{num(run['flood_budget'], 0)} in {run['flood_seconds']:.1f} s"
    )
    answers = ", ".join(f"{name} ×{n:,}" for name, n in run["flood_answers"].items()) or "none"
    return (
        f"the flood ({run['flood_threads']} threads): {run['flood_accepted']:,} of {run['flood_requests']:,} "
        f"requests accepted ({budget}); answers: {answers}; web CPU per well-behaved write "
        f"{fmt_ms(run['beside_flood_web_cpu_ms_per_write'])} beside it, "
        f"{fmt_ms(run['alone_web_cpu_ms_per_write'])} alone"
    )


def runaway_goals(results: list[ScenarioResult]) -> list[dict[str, Any]]:
    summary = runaway_summary(results)
    if summary is None:
        return []
    goals = []
    for run in summary["runs"]:
        p99, throughput = run["p99_ratio"], run["throughput_ratio"]
        goals.append(
            _row(
                f"runaway agent ({run['workers']}): well-behaved p99 beside a flood ≤ "
                f"{FLOODED_P99_GOAL} × alone",
                f"≤ {FLOODED_P99_GOAL:.2f}",
                f"{fmt_ratio(p99)} ({fmt_ms(run['beside_flood_p99_ms'])} / {fmt_ms(run['alone_p99_ms'])})",
                None if p99 is None else p99 <= FLOODED_P99_GOAL,
                _flood_said(run),
            )
        )
        goals.append(
            _row(
                f"runaway agent ({run['workers']}): well-behaved writes/s beside a flood ≥ "
                f"{FLOODED_THROUGHPUT_GOAL} × alone",
                f"≥ {FLOODED_THROUGHPUT_GOAL:.2f}",
                f"{fmt_ratio(throughput)} ({num(run['beside_flood_writes_per_second'])} / "
                f"{num(run['alone_writes_per_second'])} writes/s)",
                None if throughput is None else throughput >= FLOODED_THROUGHPUT_GOAL,
                _flood_said(run),
            )
        )
    counts = [run["double_bookings"] for run in summary["runs"]]
    known = [c for c in counts if c is not None]
    goals.append(
        _row(
            "runaway agent: zero double bookings on the well-behaved and the flooding agents' calendars",
            "0",
            f"{sum(known)} in {len(summary['runs'])} kinds of web worker",
            (sum(known) == 0) if len(known) == len(counts) else None,
            "; ".join(f"{run['workers']}: {run['double_bookings']}" for run in summary["runs"]),
        )
    )
    cost = summary["rate_check_cost"]
    if cost is not None:
        value = cost["ratio"]
        goals.append(
            _row(
                f"per-agent request-rate check: HTTP disjoint writes/s with it on ≥ {RATE_CHECK_COST_GOAL} × "
                f"off ({cost['workers']})",
                f"≥ {RATE_CHECK_COST_GOAL:.2f}",
                f"{fmt_ratio(value)} ({num(cost['on_writes_per_second'])} / "
                f"{num(cost['off_writes_per_second'])} writes/s)",
                None if value is None else value >= RATE_CHECK_COST_GOAL,
                f"p99 {fmt_ms(cost['on_p99_ms'])} on, {fmt_ms(cost['off_p99_ms'])} off; web CPU per write "
                f"{fmt_ms(cost['on_web_cpu_ms_per_write'])} on, "
                f"{fmt_ms(cost['off_web_cpu_ms_per_write'])} off",
            )
        )
    return goals


def runaway_markdown(summary: dict[str, Any] | None) -> list[str]:
    if not summary:
        return []
    first = summary["runs"][0]
    limits = first["flood_limits"]
    given = f"{num(limits['requests_per_second'], 0)} requests/s, burst {limits['request_burst']}"
    lines = [
        "",
        "**A runaway agent** (the well-behaved agents book disjoint slots through HTTP alone, then while "
        f"one more agent holds and releases as fast as {first['flood_threads']} threads can, on calendars "
        f"of its own; its limits: {given}; each kind of web worker on a server of its own):",
        "",
        "| web workers | writes/s alone / beside the flood | ratio | p99 alone / beside | ratio "
        "| well-behaved errors | flood requests/s | flood accepted/s | flood answers | double bookings |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|",
    ]
    for run in summary["runs"]:
        answers = ", ".join(f"{name} ×{n:,}" for name, n in run["flood_answers"].items()) or "none"
        lines.append(
            f"| {run['workers']} | {num(run['alone_writes_per_second'])} / "
            f"{num(run['beside_flood_writes_per_second'])} | {fmt_ratio(run['throughput_ratio'])} "
            f"| {fmt_ms(run['alone_p99_ms'])} / {fmt_ms(run['beside_flood_p99_ms'])} "
            f"| {fmt_ratio(run['p99_ratio'])} | {run['well_behaved_errors']} "
            f"| {num(run['flood_requests_per_second'])} | {num(run['flood_accepted_per_second'])} "
            f"| {answers} | {'n/a' if run['double_bookings'] is None else run['double_bookings']} |"
        )
    cost = summary["rate_check_cost"]
    if cost is not None:
        lines += [
            "",
            f"The per-agent request-rate check ({cost['workers']}; the well-behaved agents alone, halves "
            "on, off, off, on): "
            f"{num(cost['on_writes_per_second'])} writes/s on, {num(cost['off_writes_per_second'])} off "
            f"(on/off {fmt_ratio(cost['ratio'])}); p99 {fmt_ms(cost['on_p99_ms'])} on, "
            f"{fmt_ms(cost['off_p99_ms'])} off; web CPU per write "
            f"{fmt_ms(cost['on_web_cpu_ms_per_write'])} on, {fmt_ms(cost['off_web_cpu_ms_per_write'])} off.",
        ]
    return lines
