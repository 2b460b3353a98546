"""`kir tune RECORD…`: search launch configuration and compile options of recorded
launches with Optuna (replay time, verified output), print the trials and the best
variant against the recorded code, and store the winner the JIT client may use in
its kernel-object cache under the key it computes at the app's launch (kir.tune,
docs/tune.md). Exit 1 when a record has no verified trial."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from kir.commands.replay_all import ClusterOptions
from kir.envelope import envelope
from kir.errors import OptionError

SCHEMA = "kir.tune/1"


def add_arguments(parser) -> None:
    parser.add_argument("records", metavar="RECORD", nargs="+",
                        help="a .kirrec file, or a recording directory (kir record -o DIR): all its records")
    parser.add_argument("--trials", type=int, default=20, metavar="N", help="trials per record (default 20)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--space", metavar="FILE", help="the search space, a JSON file (docs/tune.md)")
    where.add_argument("--preset", default="standard", choices=("compiler", "quick", "standard", "full"),
                       help="a built-in space (default standard; compiler: compile options only, at the "
                            "recorded launch)")
    parser.add_argument("--jit-cache", metavar="DIR",
                        help="store the winner the JIT client may run in this kernel-object cache, under the "
                             "JIT key `kir run --jit-cache DIR` computes at the app's launch")
    parser.add_argument("--store", choices=("better", "always", "never"), default="better",
                        help="store the hand-off only when faster than the recorded code (default), always, "
                             "or never (report only)")
    parser.add_argument("--client-specialize", metavar="grid,block", default="",
                        help="what the JIT client specializes (kir run's KIR_JIT_SPECIALIZE): the hand-off may "
                             "then use code with constant dims or launch bounds")
    parser.add_argument("--client-bounds", metavar="MAXT[,MINB]",
                        help="the launch bounds the JIT client keys on (KIR_JIT_BOUNDS)")
    parser.add_argument("--client", metavar="NAME", action="append", default=[],
                        help="hand off to this client only (repeatable): a client declared in the --jit-cache "
                             "directory (DIR/.jit/clients/NAME.json, docs/jit.md), or `reference` (the one the "
                             "--client-* options describe). Default: the reference client and every declared one")
    parser.add_argument("--seed", type=int, metavar="N", help="the sampler's seed (repeatable searches)")
    parser.add_argument("--device", type=int, default=0, metavar="N", help="the CUDA device (default 0)")
    spread = parser.add_argument_group("across GPUs and nodes (Dask)")
    spread.add_argument("--workers", metavar="N", nargs="?", const="auto",
                        help="Dask worker processes on this machine (auto: one per GPU): records, and each "
                             "record's trials, spread over them")
    spread.add_argument("--scheduler", metavar="ADDRESS", help="run on a running Dask cluster")
    spread.add_argument("--scheduler-file", metavar="FILE", help="the same, named by its scheduler file")
    spread.add_argument("--storage", metavar="URL",
                        help="the Optuna storage the trials are shared through: journal:PATH (a journal file "
                             "on a shared file system), sqlite:///FILE, ... (default: in memory; with "
                             "--workers/--scheduler, journal:kir-tune.journal). A study continues where an "
                             "earlier run with the same storage stopped")
    parser.add_argument("--resume", action="store_true",
                        help="continue the record's study in --storage even when it was run with another space "
                             "or executor (default: start a new study then, with a warning)")
    parser.add_argument("--executor", metavar="MODULE:FUNCTION",
                        help="run each trial as FUNCTION(path, point) instead of replaying it (tests)")
    parser.add_argument("--json", action="store_true", help=f"print one JSON object ({SCHEMA})")
    from kir.progress import add_argument as add_progress_argument
    add_progress_argument(parser)


def record_paths(items: list[str]) -> list[str]:
    from kir.record import Recording
    paths = []
    for item in items:
        if Path(item).is_dir():
            found = Recording(item).record_paths
            if not found:
                raise OptionError(f"{item}: no records to tune (records/ holds no .kirrec file)")
            paths += [str(p) for p in found]
        else:
            paths.append(item)
    return paths


def client_of(args: argparse.Namespace):
    from kir.jit import Specialization
    from kir.tune import Client
    dims = {d.strip() for d in args.client_specialize.split(",") if d.strip()}
    unknown = dims - {"grid", "block"}
    if unknown:
        raise OptionError(f"--client-specialize {args.client_specialize!r}: expected grid, block or grid,block")
    from kir.jit.values import parse_bounds
    bounds = Specialization(bounds=parse_bounds(args.client_bounds, "--client-bounds")).bounds \
        if args.client_bounds else None
    return Client("grid" in dims, "block" in dims, bounds)


def clients_of(args: argparse.Namespace) -> list:
    """The clients the hand-off is for: the reference client of the --client-* options and
    every client declared in the --jit-cache directory (kir.jit.clients), or those --client names."""
    from kir.tune import Client
    reference = client_of(args)
    declared = []
    if args.jit_cache:
        from kir.jit.clients import declared as read_declared
        found, warnings = read_declared(args.jit_cache)
        for warning in warnings:
            print(f"kir: warning: {warning}", file=sys.stderr)
        declared = [Client.from_descriptor(d) for d in found]
    if not args.client:
        return [reference, *declared]
    by_name = {"reference": reference, **{c.name: c for c in declared}}
    unknown = [n for n in args.client if n not in by_name]
    if unknown:
        where = f"{args.jit_cache}/.jit/clients" if args.jit_cache else "no --jit-cache"
        raise OptionError(f"--client {unknown[0]}: not declared ({where}; declared: "
                          f"{', '.join(sorted(by_name))})")
    return [by_name[n] for n in dict.fromkeys(args.client)]


@dataclass(frozen=True)
class TuneOptions:
    """`kir tune`'s options, read from the command line once (`from_args`, checked there)."""
    paths: tuple[str, ...]            #: the records (a directory's expanded)
    space: object                     #: a kir.tune.Space
    trials: int = 20
    client: object = None             #: the kir.tune.Clients the hand-off is for
    jit_cache: str | None = None
    store: str = "better"
    seed: int | None = None
    device: int = 0
    cluster: ClusterOptions = ClusterOptions()
    storage: str | None = None        #: journal:kir-tune.journal on a cluster unless given
    executor: str | None = None
    json: bool = False
    resume: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TuneOptions:
        from kir.tune import Space
        if args.trials < 1:
            raise OptionError(f"--trials {args.trials}: expected a positive number")
        space = Space.load(args.space) if args.space else Space.preset(args.preset)
        paths = tuple(record_paths(args.records))
        client = clients_of(args)
        cluster = ClusterOptions.from_args(args)
        storage = "journal:kir-tune.journal" if cluster.asked and args.storage is None else args.storage
        return cls(paths=paths, space=space, trials=args.trials, client=client, jit_cache=args.jit_cache,
                   store=args.store, seed=args.seed, device=args.device, cluster=cluster, storage=storage,
                   executor=args.executor, json=args.json, resume=args.resume)


def run(args: argparse.Namespace) -> int:
    from kir.record import Record
    from kir.tune import tune
    opts = TuneOptions.from_args(args)
    for path in opts.paths:
        Record.load(path)  # a bad record is exit 2 before any trial runs
    cluster = opts.cluster.open()
    try:
        from kir.progress import Progress
        with Progress("tuning: trial", total=len(opts.paths) * opts.trials) as progress:
            progress.update(0)
            results = tune(list(opts.paths), opts.space, opts.trials, storage=opts.storage, cluster=cluster,
                           seed=opts.seed, executor=opts.executor, client=opts.client, cache=opts.jit_cache,
                           store=opts.store, device=opts.device, progress=progress.callback,
                           resume=opts.resume)
    finally:
        if cluster is not None:
            cluster.close()
    for r in results:
        for warning in r.warnings:
            print(f"kir: warning: {r.outcome.path}: {warning}", file=sys.stderr)
    status = 1 if any(r.outcome.best() is None for r in results) else 0
    if opts.json:
        print(json.dumps(envelope(SCHEMA, trials=opts.trials, storage=opts.storage,
                          jit_cache=opts.jit_cache, store=opts.store,
                          records=[r.to_json() for r in results],
                          conflicts=[h.conflict | {"record": r.outcome.path, "client": h.client}
                                     for r in results for h in r.handoffs if h.conflict is not None],
                          exit_status=status)))
    else:
        for r in results:
            print_record(r, opts.jit_cache)
    return status


def cell(value, fmt="{}") -> str:
    return "-" if value is None else fmt.format(value)


def print_record(r, cache) -> None:
    from kir.tune.study import speedup
    o = r.outcome
    print(f"{Path(o.path).name}: {o.record.kernel.demangled or o.record.kernel.name} on {o.arch or '?'}")
    rec = o.recorded
    if rec.get("median_ms") is not None:
        print(f"  recorded code: {rec['median_ms']:.4f} ms per launch ({rec.get('registers') or '?'} registers), "
              f"{'verified' if rec.get('verified') else 'NOT verified'}")
    else:
        print(f"  recorded code: not measured ({rec.get('error') or 'no result'})")
    header = ("#", "state", "ms", "speedup", "regs", "spills", "compile s", "variant")
    table = [header]
    for row in o.rows:
        res = row.result
        state = row.state if row.state != "pruned" else (res.get("status") or "pruned")
        spills = None if res.get("spill_stores") is None else (res.get("spill_stores") or 0) + \
            (res.get("spill_loads") or 0)
        table.append((str(row.number), state, cell(res.get("median_ms"), "{:.4f}"),
                      cell(speedup(o.recorded_ms, row.ms), "{:.2f}x"), cell(res.get("registers")), cell(spills),
                      cell(res.get("compile_seconds"), "{:.2f}"),
                      (row.point.describe() if row.point else "-") + (f"  [{res['error']}]" if res.get("error")
                                                                      else "")))
    widths = [max(len(line[c]) for line in table) for c in range(len(header) - 1)]
    for line in table:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1])
    best = o.best()
    if best is None:
        print("  no verified trial")
    else:
        note = "" if best.point.recorded_launch else \
            "  (another launch configuration: a suggestion for the source, never applied by the JIT client)"
        print(f"  best: trial {best.number}, {best.ms:.4f} ms ({cell(speedup(o.recorded_ms, best.ms), '{:.2f}x')} "
              f"the recorded code): {best.point.describe()}{note}")
    for h in r.handoffs:
        who = "the JIT client" if h.client == "reference" else f"client {h.client}"
        if h.row is None:
            print(f"  hand-off to {who}: none ({h.reason})")
            continue
        where = f"stored in {cache} under {h.key}" if h.stored else f"not stored: {h.reason} (key {h.key})"
        print(f"  hand-off to {who}: trial {h.row.number}, {h.row.ms:.4f} ms "
              f"({cell(speedup(o.recorded_ms, h.row.ms), '{:.2f}x')}): {h.row.point.describe()}; {where}")
        if h.conflict is not None:
            c = h.conflict
            print(f"  conflict: key {c['key']} also tuned by {c['other_record']} ({c['other_ms']:.4f} ms): kept "
                  f"{'this record' if c['kept'] == 'this' else 'that one'}")
    sys.stdout.flush()


__all__ = ["add_arguments", "cell", "client_of", "clients_of", "print_record", "record_paths", "run", "SCHEMA", "TuneOptions"]
