"""The report as Markdown: the results, ratios and goals tables, then a section per scenario and probe."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.formatting import fmt_ms, fmt_ratio, met, num, pct, variant_label
from bench.goals import SEED_HEADLINE
from bench.meeting_report import meeting_markdown
from bench.runaway_report import runaway_markdown
from bench.stats import scenario_label

if TYPE_CHECKING:
    from bench.report import Report


def markdown(report: Report) -> str:
    data = report.data
    machine = data["machine"]
    lines = [
        f"Run of {data['generated_at']} ({data['wall_seconds']:.0f} s in all).",
        "",
        f"- **Machine:** {machine['cpu_count']} cores (`os.cpu_count()`), {machine['platform']}; "
        f"load average {machine['load_average_before']} before, {machine['load_average_after']} after",
        f"- **PostgreSQL:** {machine['postgresql']} — {machine['database']}",
        f"- **Python** {machine['python']}, **Django** {machine['django']}, "
        f"**gunicorn** {machine['gunicorn']} ({machine['gunicorn_workers'] or 'external'} workers), "
        f"**psycopg** {machine['psycopg']}",
        f"- **Command:** `{data['command']}`"
        + (f" at commit `{machine['commit']}`" if machine.get("commit") else ""),
        "",
        "| scenario | variant | mode | attempts | successes | conflicts | errors | double bookings "
        "| ops/s | bookings/s | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in data["results"]:
        latency = row["latency_ms"]
        errors = str(row["errors"])
        if row["lost_holds"]:
            errors += f" (+{row['lost_holds']} lost holds)"
        lines.append(
            f"| {scenario_label(row['scenario'], row)} | {variant_label(row)} "
            f"| {row['mode']} | {row['attempts']:,} | {row['successes']:,} | {row['conflicts']:,} | {errors} "
            f"| {'n/a' if row['double_bookings'] is None else row['double_bookings']} "
            f"| {num(row['ops_per_second'])} | {num(row['bookings_per_second'])} "
            f"| {num(latency['p50'], 2)} | {num(latency['p95'], 2)} | {num(latency['p99'], 2)} |"
        )
    lines += [
        "",
        "`lost holds`: commits or releases answered `hold_expired` / `hold_evicted` in the mix — the "
        "designed outcome of a short TTL and of preemption, not errors.",
        "",
        "**Ratios (same run, same database):**",
        "",
    ]
    if data["ratios"]:
        lines += [
            "| scenario | engine | baseline | ops/s ratio | bookings/s ratio |",
            "|---|---|---|--:|--:|",
        ]
    else:
        lines.append("No baseline ran alongside the engine in this run, so there are no ratios.")
    for r in data["ratios"]:
        lines.append(
            f"| {r['scenario']} | {r['engine_mode']} | {r['baseline']} "
            f"| {fmt_ratio(r['ops_per_second_ratio'])} | {fmt_ratio(r['bookings_per_second_ratio'])} |"
        )
    lines += ["", "**Goals:**", "", "| goal | target | measured | | why (measured) |"]
    lines.append("|---|---|---|---|---|")
    for goal in data["goals"]:
        lines.append(
            f"| {goal['goal']} | {goal['target']} | {goal['measured']} | {met(goal['met'])} "
            f"| {goal.get('why', '')} |"
        )
    herds = [r for r in data["results"] if r["scenario"].startswith("herd") or r["scenario"] == "nodes-herd"]
    if herds:
        lines += [
            "",
            "**Thundering herd** (every agent tries the same slot at once; a new slot per round; "
            "`herd-uncongested`: as many agents as gunicorn workers; `herd500`: the big herd; "
            "`nodes-herd ×n`: racers spread over n web nodes):",
            "",
            "| scenario | variant | mode | agents | rounds | one winner | several winners | no winner "
            "| winner 201 p50 / p99 | loser 409 p50 / p99 | loser/winner p99 |",
            "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for row in herds:
            winner, loser = row["winner_latency_ms"], row["loser_latency_ms"]
            lines.append(
                f"| {scenario_label(row['scenario'], row)} | {variant_label(row)} "
                f"| {row['mode']} | {row['agents']} "
                f"| {row['rounds']} | {row['rounds_with_one_winner']} | {row['rounds_with_several_winners']} "
                f"| {row['rounds_without_winner']} | {fmt_ms(winner['p50'])} / {fmt_ms(winner['p99'])} "
                f"| {fmt_ms(loser['p50'])} / {fmt_ms(loser['p99'])} "
                f"| {fmt_ratio(row['loser_p99_over_winner_p99'])} |"
            )
        engine_herds = [r for r in herds if r["variant"] == "engine"]
        if engine_herds:
            missing = sum(r.get("losers_without_alternatives", 0) for r in engine_herds)
            lines += ["", f"Engine losers answered 409 without alternatives: {missing}."]
    lines += _nodes_markdown(data.get("nodes") or [])
    lines += _big_herd_markdown(data["results"], data.get("starting_code"))
    mixes = [r for r in data["results"] if r["scenario"] == "mix"]
    if mixes:
        lines += [
            "",
            "**Agent-realistic mix** (hold → think → commit or release; short TTL; urgent holds preempt):",
            "",
            "| mode | holds granted | multi-calendar | urgent | committed | released | expired | evicted "
            "| hold→commit conversion | eviction rate | expiry rate |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for row in mixes:
            lines.append(
                f"| {row['mode']} | {row['holds_granted']} | {row['multi_calendar_holds']} "
                f"| {row['urgent_holds']} "
                f"| {row['committed']} | {row['released']} | {row['expired']} | {row['evicted']} "
                f"| {pct(row['hold_to_commit_conversion'])} | {pct(row['eviction_rate'])} "
                f"| {pct(row['expiry_rate'])} |"
            )
        for row in mixes:
            if row.get("final_states"):
                states = ", ".join(f"{k} {v}" for k, v in row["final_states"].items())
                lines.append(f"\nFinal states in the database ({row['mode']}, primary rows): {states}.")
    lines += meeting_markdown(data["results"])
    lines += runaway_markdown(data.get("runaway"))
    key_verify = data.get("key_verify")
    if key_verify:
        latency = key_verify["latency_ms"]
        argon = key_verify["argon2"]
        lines += [
            "",
            f"**API key verification** (in-process `api_key_verify`, {key_verify['calls_after_first']} calls "
            f"after the first): p50 {fmt_ms(latency['p50'])}, p95 {fmt_ms(latency['p95'])}, "
            f"p99 {fmt_ms(latency['p99'])}; the first call (argon2id t={argon['time_cost']}, "
            f"m={argon['memory_cost_kib']} KiB, p={argon['parallelism']}) "
            f"took {fmt_ms(key_verify['first_call_ms'])}.",
        ]
    history = data.get("history")
    if history:
        lines += [
            "",
            "**Calendar history** (one agent, in-process, no contention: holds on free slots of a calendar "
            "that already has N earlier bookings; the overlap look-up as EXPLAIN ANALYZE sees it):",
            "",
            "| earlier bookings | hold p50 | hold p95 | overlap look-up | rows read and discarded | plan |",
            "|--:|--:|--:|--:|--:|---|",
        ]
        for row in history:
            hold, lookup = row["hold_latency_ms"], row["overlap_lookup"]
            lines.append(
                f"| {row['earlier_bookings']:,} | {fmt_ms(hold['p50'])} | {fmt_ms(hold['p95'])} "
                f"| {fmt_ms(lookup['execution_ms'])} | {lookup['rows_removed_by_filter']:,} "
                f"| {lookup['node']} |"
            )
    lines += _cost_markdown(data.get("cost"))
    lines += ["", "![Latency distribution and throughput per scenario](img/benchmark.png)"]
    return "\n".join(lines) + "\n"


def _nodes_markdown(nodes: list[dict[str, Any]]) -> list[str]:
    if not nodes:
        return []
    lines = [
        "",
        "**Web nodes** (independent gunicorn masters on their own ports, sharing only PostgreSQL and Redis; "
        "agent i talks to node i mod n; all on this one machine, so a node adds workers, not cores):",
        "",
        "| web nodes | workers per node | disjoint writes/s | vs 1 node | disjoint p99 | web CPU per write "
        "| herd rounds with one winner | double bookings | herd winner p99 / loser p99 |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in nodes:
        doubles = [row.get("disjoint_double_bookings"), row.get("herd_double_bookings")]
        lines.append(
            f"| {row['nodes']} | {row.get('workers_per_node') or 'n/a'} "
            f"| {num(row.get('disjoint_writes_per_second'))} "
            f"| {fmt_ratio(row.get('disjoint_vs_one_node'))} "
            f"| {fmt_ms(row.get('disjoint_p99_ms'))} | {fmt_ms(row.get('web_cpu_ms_per_write'))} "
            f"| {row.get('herd_rounds_with_one_winner', 'n/a')} of {row.get('herd_rounds', 'n/a')} "
            f"| {'n/a' if None in doubles else sum(d or 0 for d in doubles)} "
            f"| {fmt_ms(row.get('herd_winner_p99_ms'))} / {fmt_ms(row.get('herd_loser_p99_ms'))} |"
        )
    return lines


def _database_and_machine(herd: dict[str, Any]) -> str:
    """ ", PostgreSQL X ms; the cores N % busy" for a big herd, as far as this machine could tell."""
    database, busy = herd.get("database_cpu_ms_per_attempt"), herd.get("machine_busy_share")
    return (f", PostgreSQL {fmt_ms(database)}" if database is not None else "") + (
        f"; the machine's cores {busy:.0%} busy through the round" if busy is not None else ""
    )


def _big_herd_markdown(results: list[dict[str, Any]], starting_code: dict[str, Any] | None) -> list[str]:
    big = next((r for r in results if r["scenario"] == "herd500" and r["variant"] == "engine"), None)
    if big is None:
        return []
    latency = big["latency_ms"]
    b = next((r for r in results if r["scenario"] == "herd500" and r["variant"] == "advisory_lock"), None)
    floor = (
        f"The same racers against (b) advisory lock through HTTP: p99 {fmt_ms(b['latency_ms']['p99'])}, "
        f"CPU per attempt {fmt_ms(b.get('web_cpu_ms_per_attempt'))} in its workers, "
        f"{fmt_ms(b.get('client_cpu_ms_per_attempt'))} in the client{_database_and_machine(b)}. "
        if b
        else ""
    )
    return [
        "",
        f"**The big herd** ({big['agents']} agents, each a thread with its own HTTP connection, race for one "
        f"slot per round through {big.get('nodes', 1)} web node(s) of {big.get('workers_per_node') or '?'} "
        f"workers): {big['rounds_with_one_winner']} of {big['rounds']} rounds with exactly one winner, "
        f"{big['double_bookings']} double bookings; every attempt p50 {fmt_ms(latency['p50'])}, "
        f"p99 {fmt_ms(latency['p99'])}; winner p99 {fmt_ms(big['winner_latency_ms']['p99'])}, loser p99 "
        f"{fmt_ms(big['loser_latency_ms']['p99'])} (ratio {fmt_ratio(big['loser_p99_over_winner_p99'])}). "
        f"CPU per attempt: web workers {fmt_ms(big.get('web_cpu_ms_per_attempt'))}, the racers' own client "
        f"(this process, on the same cores) {fmt_ms(big.get('client_cpu_ms_per_attempt'))}"
        f"{_database_and_machine(big)}. {floor}{_starting_code_sentence(starting_code)}"
        f"The seed product published {SEED_HEADLINE['racers']} concurrent attempts, "
        f"{SEED_HEADLINE['double_bookings']} double bookings, p99 {SEED_HEADLINE['p99_ms']:.0f} ms "
        "(docs/scaling.md compares them).",
    ]


def _starting_code_sentence(starting_code: dict[str, Any] | None) -> str:
    """What the starting code's big herd did in this run (bench/starting_code.py), or why it was not run."""
    if not starting_code:
        return ""
    start = starting_code.get("result")
    if start is None:
        return f"The starting code ({starting_code['commit']}) was not raced: {starting_code['not_raced']}. "
    return (
        f"The starting code ({starting_code['commit']}), raced round by round in turn with the engine: "
        f"{start['rounds_with_one_winner']} of {start['rounds']} rounds with one winner, "
        f"{start['double_bookings']} double bookings, p50 {fmt_ms(start['latency_ms']['p50'])}, "
        f"p99 {fmt_ms(start['latency_ms']['p99'])}; CPU per attempt: web workers "
        f"{fmt_ms(start.get('web_cpu_ms_per_attempt'))}, the racers' client "
        f"{fmt_ms(start.get('client_cpu_ms_per_attempt'))}{_database_and_machine(start)}. "
    )


def _cost_markdown(cost: dict[str, Any] | None) -> list[str]:
    if not cost:
        return []
    hot = cost["hot_calendar"]
    lock = cost["lock_hold_ms"]
    backend = cost["postgres_cpu_ms_per_booking"]
    return [
        "",
        f"**Cost of one booking** (hold + commit, one agent, in-process, no contention; {cost['bookings']} "
        "bookings timed, then as many traced with libpq's protocol trace):",
        "",
        "| per booking | |",
        "|---|--:|",
        f"| wall time p50 / p99 | {fmt_ms(cost['wall_ms_per_booking']['p50'])} / "
        f"{fmt_ms(cost['wall_ms_per_booking']['p99'])} |",
        f"| round trips to PostgreSQL | {cost['round_trips_per_booking']:.1f} |",
        f"| waiting for PostgreSQL's answers | {fmt_ms(cost['postgres_wait_ms_per_booking'])} |",
        f"| CPU in this process (Python, psycopg) | {fmt_ms(cost['app_cpu_ms_per_booking'])} |",
        "| CPU of the PostgreSQL backend | "
        + (fmt_ms(backend) if backend is not None else f"n/a ({cost['postgres_cpu_note']})")
        + " |",
        f"| calendar lock held per write, p50 / p99 | {fmt_ms(lock['p50'])} / {fmt_ms(lock['p99'])} |",
        "",
        "One calendar's ceiling, 1 / (lock held, p50): "
        f"**{num(cost['calendar_ceiling_writes_per_second'], 0)} writes/s**. "
        f"Measured: {hot['threads']} agents booking disjoint slots on one calendar made "
        f"{num(hot['writes_per_second'])} writes/s ({num(hot['bookings_per_second'])} bookings/s, p99 "
        f"{fmt_ms(hot['latency_ms']['p99'])}, {hot['errors']} errors), "
        f"{fmt_ratio(hot['share_of_ceiling'])} of the ceiling.",
    ]
