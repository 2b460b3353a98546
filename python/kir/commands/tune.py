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
    verify = parser.add_argument_group("verifying trials with a tolerance (default: the space's, else the "
                                       "record's annotations, else bitwise)")
    verify.add_argument("--atol", type=float, help="absolute tolerance")
    verify.add_argument("--rtol", type=float, help="relative tolerance")
    verify.add_argument("--ulp", type=int, metavar="N", help="at most N units in the last place per element")
    from kir.replay import DTYPES, NORMS
    verify.add_argument("--norm", choices=NORMS, default="linf", help="norm of the difference (default linf)")
    verify.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="element type of the outputs (default float32)")
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


@dataclass(frozen=True)
class TuneOptions:
    """`kir tune`'s options, read from the command line once (`from_args`, checked there)."""
    paths: tuple[str, ...]            #: the records (a directory's expanded)
    space: object                     #: a kir.tune.Space
    trials: int = 20
    client: object = None             #: the kir.tune.Client the hand-off is for
    jit_cache: str | None = None
    store: str = "better"
    seed: int | None = None
    device: int = 0
    cluster: ClusterOptions = ClusterOptions()
    storage: str | None = None        #: journal:kir-tune.journal on a cluster unless given
    executor: str | None = None
    json: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TuneOptions:
        from kir.tune import Space
        if args.trials < 1:
            raise OptionError(f"--trials {args.trials}: expected a positive number")
        space = Space.load(args.space) if args.space else Space.preset(args.preset)
        from kir.commands.replay import tolerance_of
        tolerance = tolerance_of(args)
        if tolerance is not None:  # the command line's overrides the space's
            space.tolerance = tolerance.to_json()
        paths = tuple(record_paths(args.records))
        client = client_of(args)
        cluster = ClusterOptions.from_args(args)
        storage = "journal:kir-tune.journal" if cluster.asked and args.storage is None else args.storage
        return cls(paths=paths, space=space, trials=args.trials, client=client, jit_cache=args.jit_cache,
                   store=args.store, seed=args.seed, device=args.device, cluster=cluster, storage=storage,
                   executor=args.executor, json=args.json)


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
                           store=opts.store, device=opts.device, progress=progress.callback)
    finally:
        if cluster is not None:
            cluster.close()
    status = 1 if any(r.outcome.best() is None for r in results) else 0
    if opts.json:
        print(json.dumps(envelope(SCHEMA, trials=opts.trials, storage=opts.storage,
                          jit_cache=opts.jit_cache, store=opts.store,
                          records=[r.to_json() for r in results], exit_status=status)))
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
    h = r.handoff
    if h.row is None:
        print(f"  hand-off: none ({h.reason})")
    else:
        where = f"stored in {cache} under {h.key}" if h.stored else f"not stored: {h.reason} (key {h.key})"
        print(f"  hand-off to the JIT client: trial {h.row.number}, {h.row.ms:.4f} ms "
              f"({cell(speedup(o.recorded_ms, h.row.ms), '{:.2f}x')}): {h.row.point.describe()}; {where}")
    sys.stdout.flush()


__all__ = ["add_arguments", "cell", "client_of", "print_record", "record_paths", "run", "SCHEMA", "TuneOptions"]
