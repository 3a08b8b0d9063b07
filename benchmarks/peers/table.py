"""The results table, for the terminal and as markdown for docs/performance.md."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

from benchmarks.peers.harness import Summary

OURS_KEY = "ours"
HEADERS = (
    "tool",
    "version",
    "start to last result s",
    "events/s whole process",
    "events/s steady",
    "CPU s per 1M events",
    "peak RSS MB",
    "output checked",
    "vs ours (whole)",
    "notes",
)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def machine() -> str:
    mem_kb = 0
    try:
        with open("/proc/meminfo") as fh:
            mem_kb = int(fh.readline().split()[1])
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    java = java.splitlines()[0] if java else "no java"
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_kb / 1024 / 1024:.0f} GB RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()} "
        f"(harness), {java}"
    )


def rows(summaries: Sequence[Summary], events: int | None = None) -> list[tuple[str, ...]]:
    ours = next((s for s in summaries if s.contender.key == OURS_KEY), None)
    ours_rate = ours.whole_events_per_s if ours else None
    out = []
    for s in summaries:
        rate = s.whole_events_per_s
        steady = s.events_per_s
        cpu = s.cpu_s_per_million
        checked = {True: "yes", False: "no", None: "n/a (no output)"}[s.checked]
        ratio = f"{rate / ours_rate:.2f}x" if rate and ours_rate else "n/a"
        detail = next((r.detail for r in s.runs if r.checked is False), "")
        note = s.contender.note + (f" FAILED: {detail}" if detail else "")
        if events is not None and s.events != events:
            note = f"**on {s.events:,} events** (too slow for {events:,}); {note}"
        out.append(
            (
                s.contender.tool,
                s.version,
                f"{s.to_result_s:.1f}" if s.to_result_s is not None else "-",
                f"{rate:,.0f}" if rate else "-",
                f"{steady:,.0f}" if steady else "-",
                f"{cpu:.1f}" if cpu is not None else "-",
                f"{s.peak_rss_bytes / 2**20:.0f}" if s.peak_rss_bytes else "-",
                checked,
                ratio,
                note.replace("|", "/").replace("\n", " "),
            )
        )
    return out


def terminal(summaries: Sequence[Summary], events: int) -> str:
    """The table without the notes, plus an events column."""
    body = [(*HEADERS[:-1], "events")]
    for r, s in zip(rows(summaries), summaries, strict=True):
        body.append((*r[:-1], f"{s.events:,}"))
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(
    summaries: Sequence[Summary], events: int, repeat: int, load_before: str, load_after: str
) -> str:
    lines = [
        f"Run {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}: {events:,} events, "
        f"median of {repeat} run(s) each.",
        "",
        "Whole process: events / (the process's start to its last result flushed: "
        "interpreter, imports, consumer-group join and restore included). Steady: events / "
        "(first record to last result). CPU: user + system seconds of the process and its "
        "children, start to exit, per million events. Peak RSS: the process tree's.",
        "",
        f"Machine: {machine()}.",
        f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "| " + " | ".join("---" for _ in HEADERS) + " |",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows(summaries, events)]
    lines += ["", "Per run (whole process / steady events/s, in run order):", ""]
    for s in summaries:
        per_run = ", ".join(
            f"{_k(r.whole_events_per_s(s.events))} / {_k(r.events_per_s(s.events))}" for r in s.runs
        )
        lines.append(f"- {s.contender.tool}: {per_run}")
    return "\n".join(lines) + "\n"


def _k(rate: float | None) -> str:
    return f"{rate / 1000:.1f}k" if rate else "-"
