"""Ratios against the baselines of the same run, the table (rich when installed), markdown."""

from __future__ import annotations

import sys
from typing import Any

from .common import (
    LABELS,
    PROCESSES_CLAIMS,
    Results,
    processes_metric,
)

OURS = "faststream-sqla"
SQLBROKER = "faststream-sqlbroker"
PGQUEUER = "pgqueuer"
SYSTEM_ORDER = ["raw", "pipeline", OURS, SQLBROKER, PGQUEUER]
SCENARIO_ORDER = [
    "raw", "pipeline", "drain", "drain-batch", "publish", "latency", "scale", "sustained",
    "processes",
]
COLUMNS = ("pipeline", "raw", "sqlbroker", "pgqueuer")

# (scenario, metric) -> column -> (system, scenario, metric, database or None for "same")
Ref = tuple[str, str, str, str | None]
_DRAIN: dict[str, Ref] = {
    "pipeline": ("pipeline", "pipeline", "log_off_msg_per_s", "-"),
    "raw": ("raw", "raw", "e2e_msg_per_s", None),
    "sqlbroker": (SQLBROKER, "drain", "msg_per_s", None),
    "pgqueuer": (PGQUEUER, "drain", "msg_per_s", None),
}
RULES: dict[tuple[str, str], dict[str, Ref]] = {
    ("drain", "msg_per_s"): _DRAIN,
    ("drain-batch", "msg_per_s"): _DRAIN,
    ("publish", "single_msg_per_s"): {
        "raw": ("raw", "raw", "publish_single_msg_per_s", None),
        "sqlbroker": (SQLBROKER, "publish", "single_msg_per_s", None),
        "pgqueuer": (PGQUEUER, "publish", "single_msg_per_s", None),
    },
    ("publish", "batch_msg_per_s"): {
        "raw": ("raw", "raw", "publish_msg_per_s", None),
        "sqlbroker": (SQLBROKER, "publish", "batch_msg_per_s", None),
        "pgqueuer": (PGQUEUER, "publish", "batch_msg_per_s", None),
    },
    ("scale", "claim_archive_small_msg_per_s"): {
        "raw": ("raw", "raw", "claim_archive_msg_per_s", None)},
    ("scale", "claim_archive_big_msg_per_s"): {
        "raw": ("raw", "raw", "claim_archive_msg_per_s", None)},
    ("scale", "claim_archive_big_archive_msg_per_s"): {
        "raw": ("raw", "raw", "claim_archive_msg_per_s", None)},
    ("scale", "claim_archive_one_timestamp_msg_per_s"): {
        "raw": ("raw", "raw", "claim_archive_msg_per_s", None)},
    ("processes", "workers_1_msg_per_s"): {
        "pipeline": _DRAIN["pipeline"], "raw": _DRAIN["raw"]},
    ("processes", "workers_2_msg_per_s"): {
        "pipeline": _DRAIN["pipeline"], "raw": _DRAIN["raw"]},
    ("drain", "access_log_msg_per_s"): {
        "pipeline": ("pipeline", "pipeline", "log_on_msg_per_s", "-")},
    ("pipeline", "log_on_msg_per_s"): {
        "pipeline": ("pipeline", "pipeline", "log_off_msg_per_s", "-")},
}
for _key in ("p50_ms", "p99_ms", "max_ms"):
    RULES[("latency", _key)] = {
        "sqlbroker": (SQLBROKER, "latency", _key, None),
        "pgqueuer": (PGQUEUER, "latency", _key, None),
    }
    RULES[("latency", f"{_key}@mfi=0.1")] = {
        "sqlbroker": (SQLBROKER, "latency", _key, None),
        "pgqueuer": (PGQUEUER, "latency", _key, None),
    }
SYSTEM_LABELS = {OURS: "sqla (ours)", SQLBROKER: "sqlbroker"}
OWN_COLUMN = {"pipeline": "pipeline", "raw": "raw", SQLBROKER: "sqlbroker", PGQUEUER: "pgqueuer"}


def add_ratios(results: Results) -> None:
    """`ratios[column] = value / baseline` for every figure a rule covers."""
    for fig in results.figures:
        rule = RULES.get((fig["scenario"], fig["metric"]))
        if not rule or not fig.get("value"):
            continue
        ratios = {}
        for column, (system, scenario, metric, database) in rule.items():
            if OWN_COLUMN.get(fig["system"]) == column:
                continue
            base = results.get(system, scenario, metric, database or fig["database"])
            if base:
                ratios[column] = fig["value"] / base
        if fig["scenario"] == "publish" and fig["metric"] == "single_msg_per_s":
            ceiling = results.get("raw", "raw", "publish_msg_per_s", fig["database"])
            if ceiling:
                fig.setdefault("details", {})["of_raw_batch_ceiling"] = fig["value"] / ceiling
        if ratios:
            fig["ratios"] = ratios


METRIC_LABELS = {
    "publish_msg_per_s": "publish, batches of 1000",
    "claim_archive_msg_per_s": "claim+archive, batches of 1000",
    "e2e_msg_per_s": "end to end, batches of 1000",
    "publish_single_msg_per_s": "publish, 1 row per transaction",
    "log_off_msg_per_s": "process_message, access log off",
    "log_on_msg_per_s": "process_message, access log on",
    "msg_per_s": "drain N, no-op handler",
    "access_log_msg_per_s": "drain N, default logging (x of pipeline: access log on)",
    "over_paired_pipeline": "drain / pipeline measured just before and after it (median)",
    "access_log_over_paired_pipeline": "the same, default logging and access log on",
    "over_paired_sqlbroker": "drain / sqlbroker's drain run between two of ours (median)",
    "over_paired_pgqueuer": "drain / pgqueuer's drain run between two of ours (median)",
    "single_msg_per_s": "publish(), sequential",
    "batch_msg_per_s": "publish_batch(1000)",
    "batch_over_paired_raw": (
        "publish_batch / raw inserts measured just before and after it (median)"
    ),
    "p50_ms": "latency p50", "p99_ms": "latency p99", "max_ms": "latency max",
    "p50_ms@mfi=0.1": "latency p50, max_fetch_interval=0.1",
    "p99_ms@mfi=0.1": "latency p99, max_fetch_interval=0.1",
    "max_ms@mfi=0.1": "latency max, max_fetch_interval=0.1",
    "claim_archive_small_msg_per_s": "claim+archive, small backlog",
    "claim_archive_big_msg_per_s": "claim+archive, big backlog",
    "big_over_small": "big / small backlog",
    "claim_archive_big_archive_msg_per_s": "claim+archive, big archive",
    "big_archive_over_small": "big archive / small",
    "claim_archive_one_timestamp_msg_per_s": "claim+archive, one-timestamp backlog",
    "one_timestamp_over_small": "one-timestamp / small backlog",
    "peak_rss_small_backlog_mib": "peak RSS draining, small backlog",
    "peak_rss_big_backlog_mib": "peak RSS draining, big backlog",
    "vacuum_off_msg_per_s": "drain N, vacuum_message_table=False",
    "vacuum_on_msg_per_s": "drain N, vacuum_message_table=True (default)",
    "vacuum_off_server_us_per_msg": "server CPU per message, vacuum_message_table=False",
    "vacuum_on_server_us_per_msg": "server CPU per message, vacuum_message_table=True",
    "vacuum_on_over_off": "with / without the broker's vacuums",
    "workers_1_msg_per_s": "faststream run --workers 1",
    "workers_2_msg_per_s": "faststream run --workers 2",
    "workers_2_over_1": "--workers 2 / --workers 1",
    "worker_cpu_us_per_msg": "W: CPU of --workers 1 per message",
    "server_cpu_us_per_msg": "S: server CPU per message, --workers 1",
    "cpu_cap_2_over_1": "cap on --workers 2 / 1: 2W / (W + S)",
    "workers_2_worker_cpu_us_per_msg": "CPU of --workers 2 per message (both processes)",
    "workers_2_server_cpu_us_per_msg": "server CPU per message, --workers 2",
    "workers_2_cpu_share": "share of all cores used by --workers 2 and the server",
}
# processes at its other claim sizes: the same baselines, the label says the size
for _size in PROCESSES_CLAIMS[1:]:
    for _name in ("workers_1_msg_per_s", "workers_2_msg_per_s", "workers_2_over_1",
                  "worker_cpu_us_per_msg", "server_cpu_us_per_msg", "cpu_cap_2_over_1",
                  "workers_2_worker_cpu_us_per_msg", "workers_2_server_cpu_us_per_msg",
                  "workers_2_cpu_share"):
        _rule = RULES.get(("processes", _name))
        if _rule is not None:
            RULES[("processes", processes_metric(_name, _size))] = _rule
        METRIC_LABELS[processes_metric(_name, _size)] = (
            f"{METRIC_LABELS[_name]}, claims of {_size}"
        )


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "msg/s":
        return f"{value:,.0f} msg/s"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "MiB":
        return f"{value:,.1f} MiB"
    if unit == "µs/msg":
        return f"{value:,.1f} µs/msg"
    if unit == "%":
        return f"{value:.1f}%"
    return f"{value:g} {unit}"


def _count(n: Any) -> str:
    n = int(n)
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else (
        f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n))


def notes(fig: dict[str, Any]) -> str:
    d = fig.get("details", {})
    out = []
    if "by_claims" in d:
        out.append("claims " + ", ".join(f"{k}: {v:,.0f}" for k, v in d["by_claims"].items()))
    if "all_configs" in d:
        out.append("configs (fetch_batch_size): " + ", ".join(
            f"{c['config']['fetch_batch_size']}: {c['msg_per_s']:,.0f}" for c in d["all_configs"]))
    if d.get("status") == "n/a":
        out.append(str(d.get("reason", "n/a")))
    if "wakeup" in d and fig["metric"].startswith("p50"):
        out.append(d["wakeup"])
    if d.get("failed_publishes"):
        out.append(f"{d['failed_publishes']} publishes failed")
    if "of_raw_batch_ceiling" in d:
        out.append(f"{d['of_raw_batch_ceiling']:.3f}x of raw batch ceiling")
    if "us_per_msg" in d:
        out.append(f"{d['us_per_msg']:.0f} µs/msg")
    if fig["metric"].startswith("claim_archive_") and "backlog" in d:
        extra = f", {_count(d['archive_rows'])} archived" if "archive_rows" in d else ""
        extra += " sharing one next_attempt_at" if d.get("one_timestamp") else ""
        out.append(f"{_count(d['backlog'])} queued{extra}, limit {d['limit']}")
    if "rss_after_connect_mib" in d:
        out.append(f"{_count(d['backlog'])} queued, {_count(d['drained'])} drained; "
                   f"{d['rss_after_connect_mib']:.1f} MiB after connect, "
                   f"{d['rss_max_during_drain_mib']:.1f} max during drain; "
                   f"buffer {d['buffer_capacity']}")
    if "event_loop" in d and fig["metric"].endswith("msg_per_s"):
        out.append(f"{d['event_loop']}, claims {d['claims']}")
    if fig["system"] == "raw" and "insert_form" in d:
        out.append(f"{d['insert_form']}; VALUES form {d['values_form_msg_per_s']:,.0f}")
    return "; ".join(out)


def sort_key(fig: dict[str, Any]) -> tuple:
    scen = fig["scenario"]
    db_order = {"-": 0, "sqlite": 1, "postgresql": 2, "mysql": 3}
    return (
        SCENARIO_ORDER.index(scen) if scen in SCENARIO_ORDER else 99,
        db_order.get(fig["database"], 9),
        SYSTEM_ORDER.index(fig["system"]) if fig["system"] in SYSTEM_ORDER else 9,
    )


def rows(results: Results) -> list[list[str]]:
    out = []
    for fig in sorted(results.figures, key=sort_key):
        ratios = fig.get("ratios", {})
        out.append([
            fig["scenario"],
            SYSTEM_LABELS.get(fig["system"], fig["system"]),
            LABELS.get(fig["database"], fig["database"]),
            METRIC_LABELS.get(fig["metric"], fig["metric"]),
            fmt_value(fig["value"], fig["unit"]),
            *(f"{ratios[c]:.2f}" if c in ratios else "" for c in COLUMNS),
            notes(fig),
        ])
    return out


LEGEND = (
    "x of ... = this row's value / that baseline's, same database, same run. Throughput: "
    "higher is better; latency (ms): lower is better. raw = driver-only loop, pipeline = "
    "FastStream's consume path without a database (access log off)."
)
HEADER = ["scenario", "system", "database", "metric", "value", "x of pipeline", "x of raw",
          "x of sqlbroker", "x of pgqueuer", "notes"]


def print_table(results: Results) -> None:
    table_rows = rows(results)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(r[i]) for r in [HEADER, *table_rows]) for i in range(len(HEADER))]
        for r in [HEADER, *table_rows]:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        print(LEGEND)
        return
    table = Table(title="faststream-sqla benchmarks", caption=LEGEND, show_lines=False)
    for h in HEADER:
        table.add_column(h, justify="right" if h.startswith("x ") or h == "value" else "left",
                         overflow="fold")
    previous = None
    for r in table_rows:
        if previous is not None and r[0] != previous:
            table.add_section()
        previous = r[0]
        table.add_row(*r)
    console = Console()
    width = max(console.width, 180) if console.is_terminal else 200
    Console(width=width).print(table)


def markdown(results: Results) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows(results):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
    return "\n".join(lines) + "\n\n" + LEGEND + "\n"


def print_errors(results: Results) -> None:
    if not results.errors:
        return
    print(f"\n{len(results.errors)} problem(s):", file=sys.stderr)
    for e in results.errors:
        print(f"  - {e['scenario']}/{e['database']}/{e['what']}: {e['error']}", file=sys.stderr)
