"""`kir replay --all DIR`: replay every record of a recording (a regression run,
after a compiler or driver upgrade) and print a table of passed / failed / errors
and times. The options are `kir replay`'s (kir.commands.replay.ReplayOptions); the
rows are kir.replay.batch's; `--workers`/`--scheduler` fan out with kir.distribute
(Dask is imported only then; ClusterOptions, kir tune's too)."""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kir.envelope import envelope
from kir.errors import OptionError
from kir.files import stdout_to_stderr
from kir.progress import Progress
from kir.record import RecordError, Recording
from kir.replay.batch import STATUSES, ReplayJob, run_records
from kir.words import plural

if TYPE_CHECKING:
    from kir.commands.replay import ReplayOptions

SCHEMA_ALL = "kir.replay-all/1"


@dataclass(frozen=True)
class ClusterOptions:
    """--workers [N], --scheduler ADDRESS, --scheduler-file FILE (kir replay --all,
    kir tune), read from the command line (`from_args`, checked there)."""
    asked: bool = False               #: any of them given: a Dask cluster, else this process
    workers: int | None = None        #: local worker processes; None: auto (one per GPU)
    scheduler: str | None = None
    scheduler_file: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClusterOptions:
        if args.workers is None and args.scheduler is None and args.scheduler_file is None:
            return cls()
        workers = None
        if args.workers not in (None, "auto"):
            if not args.workers.isdigit() or int(args.workers) < 1:
                raise OptionError(f"--workers {args.workers}: expected a positive number of workers, or auto")
            workers = int(args.workers)
        return cls(True, workers, args.scheduler, args.scheduler_file)

    def open(self):
        """The Dask cluster the options ask for (kir.distribute.Cluster), or None."""
        if not self.asked:
            return None
        from kir.distribute import Cluster
        return Cluster(workers=self.workers, scheduler=self.scheduler, scheduler_file=self.scheduler_file)


def run_all(opts: ReplayOptions) -> int:
    recording = Recording(opts.recording)
    paths = recording.record_paths
    if not paths:
        raise RecordError(f"{recording.directory}: no records to replay (records/ holds no .kirrec file)")
    baseline = load_baseline(opts.baseline, SCHEMA_ALL) if opts.baseline else {}
    job = ReplayJob(code=opts.code, repeat=opts.repeat, verify=opts.verify, tolerance=opts.tolerance,
                    plan_only=opts.plan, device_arch=opts.device_arch, backend=opts.backend)
    if opts.executor:
        from kir.distribute import load_function
        job = functools.partial(load_function(opts.executor, "--executor"), job=job)
    start = time.perf_counter()
    cluster = opts.cluster.open()
    started = time.perf_counter() - start  # the cluster's start (or joining it); not in `seconds`
    start = time.perf_counter()
    try:
        # with --json, stdout carries only the JSON: a kernel's printf goes to stderr
        with stdout_to_stderr(opts.json), Progress("replaying records", total=len(paths)) as progress:
            progress.update(0)
            rows = run_records(job, paths, cluster=cluster,
                               on_row=lambda i, row: progress.advance(item=short_name(row["record"])))
        where = {"kind": cluster.kind if cluster else "in-process", "address": cluster.address if cluster else None,
                 "workers": cluster.workers if cluster else 1, "start_seconds": started}
    finally:
        if cluster is not None:
            cluster.close()
    seconds = time.perf_counter() - start
    for row in rows:
        base = baseline.get(row["record"])
        row["baseline_ms"] = base
        row["change"] = (row["median_ms"] / base - 1.0) if base and row["median_ms"] is not None else None
    counts = {status: sum(r["status"] == status for r in rows) for status in STATUSES}
    status = 1 if counts["failed"] else 2 if counts["error"] else 0
    summary = {**counts, "records": len(rows), "seconds": seconds,
               "records_per_minute": len(rows) / seconds * 60 if seconds > 0 else None}
    if opts.json:
        print(json.dumps(envelope(SCHEMA_ALL, directory=str(recording.directory),
                          mode="plan" if opts.plan else "replay", code=opts.code,
                          repeat=opts.repeat, verify=opts.verify, cluster=where,
                          baseline=opts.baseline, records=rows, summary=summary, exit_status=status)))
    else:
        print_table(rows, summary, where)
    for row in rows:
        if row["status"] == "error":
            message = row["error"] or "no message"
            print(f"kir: error: {message if message.startswith(row['path']) else row['path'] + ': ' + message}",
                  file=sys.stderr)
    return status


def load_baseline(path: str, schema: str) -> dict[str, float]:
    """Each record's median time (ms) in an earlier run's --json output."""
    from kir.files import load_json
    data = load_json(path, f"--baseline {path}")
    if not isinstance(data, dict) or data.get("format") != schema or not isinstance(data.get("records"), list):
        raise OptionError(f"--baseline {path}: not the --json output of kir replay --all ({schema})")
    times = {}
    for row in data["records"]:
        if isinstance(row, dict) and isinstance(row.get("record"), str) and \
                isinstance(row.get("median_ms"), (int, float)) and not isinstance(row["median_ms"], bool):
            times[row["record"]] = float(row["median_ms"])
    return times


COLUMNS = ("#", "record", "status", "median ms", "change", "kernel")


def short_name(name: str) -> str:
    """<static>.<identity>.kirrec as 12 hex digits of each."""
    stem = name.removesuffix(".kirrec")
    return ".".join(part[:12] for part in stem.split("."))


def cell_ms(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def cell_change(row: dict) -> str:
    return "-" if row["change"] is None else f"{row['change'] * 100:+.1f}%"


def print_table(rows: list[dict], summary: dict, where: dict) -> None:
    table = [COLUMNS] + [(str(i), short_name(r["record"]), r["status"], cell_ms(r["median_ms"]), cell_change(r),
                          r["kernel"] or "-") for i, r in enumerate(rows)]
    widths = [max(len(line[c]) for line in table) for c in range(len(COLUMNS) - 1)]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1])
    for i, r in enumerate(rows):
        for m in r["mismatches"]:
            norm = f", norm {m['norm']:g} > {m['limit']:g}" if m.get("norm") is not None else ""
            differ = "differs" if m["differing_bytes"] == 1 else "differ"
            print(f"  #{i} {m['region']}: {plural(m['differing_bytes'], 'byte')} {differ}, the first at offset "
                  f"{m['first_offset']}{norm}")
        for note in r["notes"]:
            print(f"  #{i} note: {note}")
    counts = ", ".join(plural(summary[s], s) if s == "error" else f"{summary[s]} {s}"
                       for s in STATUSES if summary[s])
    rate = f", {summary['records_per_minute']:.1f} records/minute" if summary["records_per_minute"] else ""
    place = "in this process" if where["kind"] == "in-process" else \
        f"on {where['workers']} Dask workers ({where['kind']}, {where['address']})"
    print(f"{plural(summary['records'], 'record')}: {counts}; {summary['seconds']:.2f} s{rate} {place}")


__all__ = ["cell_change", "cell_ms", "ClusterOptions", "COLUMNS", "load_baseline", "print_table", "run_all",
           "SCHEMA_ALL", "short_name"]
