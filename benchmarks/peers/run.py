"""``python -m benchmarks.peers.run`` (``make bench-peers``): the standard workload on
Quix Streams, Bytewax, Faust, Flink SQL (PyFlink) reading files and reading Kafka (its
connector jar) and Kafka Streams, beside the raw-consume ceiling and our service, each
repeated; one table of medians, also written as markdown.

Our service runs three ways: as a user runs it (``python -m service``, the spec over
REST, ``key.partitioned``), the same with the default keyed shuffle, and the runtime in
process (no REST). For every contender: the whole process's time from its start to its
last result, the steady rate (first record to last result), CPU seconds per million
events, peak RSS, and whether the output matched the expected windows.

Quick check: ``python -m benchmarks.peers.run --events 20000 --repeat 1``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from benchmarks.peers import table
from benchmarks.peers.contenders import failed, kstreams_contender, peer_contender, raw_consume
from benchmarks.peers.harness import Prepared, Summary, run_round_robin, scratch_root
from benchmarks.peers.ours import ours_contender, ours_rest_contender
from benchmarks.peers.venvs import BY_NAME, PEERS, VenvError, ensure_venv
from benchmarks.workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"
TANSU_UNSUPPORTED = {
    "kstreams": "not run on Tansu: the Java consumer of Kafka Streams 4.4 never finds its "
    "group coordinator there (--broker kafka)",
    "flink-kafka": "not run on Tansu: in a 20,000-event run there Flink's bounded Kafka "
    "source read 4 records and finished (cause not examined; --broker kafka)",
}
DEFAULT_EVENTS_FOR = {"faust": 20_000}
"""Faust handles a few hundred events/s here: 1M events would take about an hour a run."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--broker",
        choices=["tansu", "kafka"],
        default="tansu",
        help="a fresh embedded Tansu per run, or a fresh Apache Kafka broker per run "
        "(Kafka Streams and Flink's Kafka connector run only on Kafka: TANSU_UNSUPPORTED)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--peers",
        default=",".join([*(p.name for p in PEERS), "kstreams"]),
        help="comma-separated subset",
    )
    parser.add_argument("--no-ours", action="store_true", help="skip our service")
    parser.add_argument(
        "--no-shuffle", action="store_true", help="skip our service with the keyed shuffle"
    )
    parser.add_argument(
        "--no-inprocess", action="store_true", help="skip our runtime run in process"
    )
    parser.add_argument("--no-raw", action="store_true", help="skip the raw-consume ceiling")
    parser.add_argument(
        "--raw-decode", action="store_true", help="add the raw consume + orjson decode ceiling"
    )
    parser.add_argument(
        "--events-for",
        action="append",
        default=[],
        metavar="PEER=N",
        help="run PEER on N events instead (for peers too slow for the full workload); "
        f"default {DEFAULT_EVENTS_FOR}, capped at --events",
    )
    parser.add_argument("--markdown", type=Path, default=RESULTS / "peers.md")
    return parser.parse_args(argv)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # unwinds: brokers and children stop


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    load_before = table.load_average()
    events_for = dict(DEFAULT_EVENTS_FOR)
    for item in args.events_for:
        name, _, n = item.partition("=")
        events_for[name] = int(n)
    prepared: dict[int, Prepared] = {}

    def prep_for(events: int) -> Prepared:
        if events not in prepared:
            print(f"preparing {events:,} events ...", file=sys.stderr, flush=True)
            prepared[events] = Prepared.make(Workload(events=events))
        return prepared[events]

    prep_for(args.events)  # the full workload first: the file and records are cached
    root = scratch_root()
    root.mkdir(parents=True, exist_ok=True)
    summaries: list[Summary] = []

    contenders = []
    if not args.no_raw:
        contenders.append(raw_consume())
        contenders.append(raw_consume(group=True))
    if args.raw_decode:
        contenders.append(raw_consume(decode=True))
    if not args.no_ours:
        contenders.append(ours_rest_contender(partitioned=True))
        if not args.no_shuffle:
            contenders.append(ours_rest_contender(partitioned=False))
        ours = ours_contender() if not args.no_inprocess else None
        if isinstance(ours, str):
            summaries.append(failed("ours-inprocess", "Clockwork in process", ours, args.events))
        elif ours is not None:
            contenders.append(ours)
    for name in filter(None, args.peers.split(",")):
        if args.broker == "tansu" and name.strip() in TANSU_UNSUPPORTED:
            why = TANSU_UNSUPPORTED[name.strip()]
            summaries.append(failed(name.strip(), name.strip(), why, args.events))
            continue
        if name.strip() == "kstreams":
            streams = kstreams_contender()
            if isinstance(streams, str):
                summaries.append(failed("kstreams", "Kafka Streams", streams, args.events))
            else:
                contenders.append(streams)
            continue
        peer = BY_NAME[name.strip()]
        print(f"venv for {peer.tool} ...", file=sys.stderr, flush=True)
        try:
            python = ensure_venv(peer, root)
        except VenvError as exc:
            summaries.append(failed(peer.name, peer.tool, f"install failed: {exc}", args.events))
            continue
        contenders.append(peer_contender(peer, python))

    planned = [
        (c, prep_for(min(args.events, events_for.get(c.key, args.events)))) for c in contenders
    ]
    summaries += run_round_robin(planned, args.repeat, root, args.broker)

    order = {
        "raw": 0,
        "raw-group": 1,
        "raw-decode": 2,
        "ours": 3,
        "ours-shuffle": 4,
        "ours-inprocess": 5,
    }
    summaries.sort(key=lambda s: order.get(s.contender.key, 6))
    load_after = table.load_average()
    print(table.terminal(summaries, args.events))
    print(f"load average before: {load_before}; after: {load_after}")
    md = table.markdown(summaries, args.events, args.repeat, load_before, load_after)
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(md)
    print(f"markdown table written to {args.markdown}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
