"""`mneme tune` as a thin layer over kir (issue 24): what Mneme's python/mneme/tuning/cli.py
does — read a recording, search each recorded launch's configuration with Optuna, verify
every trial, write the results folder and hand the winner to the JIT — with kir's public
Python API and nothing else. No JSON bridge (`--proteus-output`): the winner is stored in
the JIT cache under the key each declared client computes at the app's launch, so kir's
reference client and a Proteus-style client (examples/proteus_client) both find it.

    python mneme_tune.py RECORDING --app APP --jit-cache DIR --results-dir OUT \
        [--preset standard] [--trials 20] [--sampler tpe] [--seed N] [--ulp N | --atol X | --rtol X]

RECORDING is a Mneme recording folder (the databases Mneme's recorder wrote) or a kir
recording; APP the binary Mneme recorded (its records are keyed by the app's static hash).
Tolerances the app annotated at record time (mneme::annotate) travel in the records and
verify the trials by default; --ulp/--atol/--rtol override them.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import kir.mneme
import kir.tune
from kir.errors import KirError
from kir.jit.clients import declared
from kir.record import Recording
from kir.replay import Tolerance


def records_of(recording: Path, app: Path | None, out: Path) -> list[str]:
    """kir records of `recording`: a Mneme recording imported into `out` (keyed by the app),
    or a kir one."""
    if kir.mneme.find_databases(recording):
        imported = kir.mneme.convert(recording, out, app=app)
        for item in imported:
            for warning in item.warnings:
                print(f"mneme tune: warning: {warning}", file=sys.stderr)
        return [str(item.record) for item in imported]
    return [str(r.path) for r in Recording(recording).records()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recording", type=Path)
    p.add_argument("--app", type=Path, help="the binary Mneme recorded")
    p.add_argument("--jit-cache", type=Path, required=True, help="where the JIT clients look up code")
    p.add_argument("--results-dir", type=Path, required=True)
    p.add_argument("--preset", default="standard", choices=sorted(kir.tune.PRESETS))
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--sampler", default="tpe")
    p.add_argument("--seed", type=int)
    p.add_argument("--store", default="better", choices=("better", "always", "never"))
    p.add_argument("--executor", help="MODULE:FUNCTION instead of GPU replays (tests)")
    for flag in ("--ulp", "--atol", "--rtol"):
        p.add_argument(flag, type=int if flag == "--ulp" else float)
    args = p.parse_args(argv)
    try:
        # the imported records stay beside the results they explain
        paths = records_of(args.recording, args.app, args.results_dir / "kir-recording")
        space = kir.tune.Space.preset(args.preset)
        tolerance = Tolerance.of(atol=args.atol, rtol=args.rtol, ulp=args.ulp)
        if tolerance is not None:
            space = dataclasses.replace(space, tolerance=tolerance.to_json())
        found, warnings = declared(args.jit_cache)
        for warning in warnings:
            print(f"mneme tune: warning: {warning}", file=sys.stderr)
        clients = [kir.tune.Client(), *(kir.tune.Client.from_descriptor(d) for d in found)]
        results = kir.tune.tune(paths, space, args.trials, sampler=args.sampler, seed=args.seed,
                                client=clients, cache=args.jit_cache, store=args.store, executor=args.executor)
        kir.tune.write_results(results, args.results_dir)
    except KirError as error:
        print(f"mneme tune: error: {error}", file=sys.stderr)
        return 2
    for r in results:
        best = r.outcome.best()
        said = f"{r.outcome.recorded_ms / best.ms:.2f}x ({best.point.describe()})" if best and best.ms else "none"
        print(f"{r.outcome.record.kernel.demangled}: best {said}")
        for h in r.handoffs:
            print(f"  hand-off {h.client} {h.key}: {'stored' if h.stored else h.reason}")
    print(f"results: {args.results_dir}")
    return 0 if all(r.outcome.best() is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
