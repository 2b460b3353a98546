"""Tuning throughput (issue 24 §4): trials per minute of an N-trial `kir tune` study
of one record (default 100, on the GPU), and the overhead per trial beyond
compiling and running the kernel.

Each trial's wall time (Optuna's start to completion) is split by kir.tune.study.phases
into compile (kir.jit's seconds, the trial result's compile_seconds), run (the rest
of the replay process's time for the trial: loading, the warm-up and timed
launches, verifying) and overhead (the rest: Optuna's sampling and storage, the
trial's trip to the replay process and back, a new replay process after a device
fault). Trials per minute: the finished trials over the time from the first one's
start to the last one's completion (the baseline, measured before, and the replay
process's start before the first trial are apart: `total_s` is the whole call). A
point the sampler proposes again is not replayed (all overhead, fast): `repeated`
counts them, `measured_per_minute` leaves them out.

    python benchmarks/tune_throughput.py REC.kirrec [--trials 100] [--preset compiler] [--sampler tpe]
    python benchmarks/tune_throughput.py REC --executor tune_fakes:timed   # no GPU (tests/support on PYTHONPATH)

Prints one line per figure, or `--json` one object; `--results-dir DIR` also writes
kir tune's results folder (docs/tune.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", help="a .kirrec file, or a recording directory (its first record)")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--preset", default="compiler", help="the search space (kir tune --preset; default compiler)")
    parser.add_argument("--sampler", default="tpe")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--executor", metavar="MODULE:FUNCTION", help="trials without a GPU (kir tune --executor)")
    parser.add_argument("--results-dir", metavar="DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from kir.commands.tune import record_paths
    from kir.tune import Space, tune
    from kir.tune.study import throughput
    path = record_paths([args.record])[0]
    start = time.perf_counter()
    (result,) = tune([path], Space.preset(args.preset), args.trials, seed=args.seed, executor=args.executor,
                     device=args.device, sampler=args.sampler, store="never")
    total = time.perf_counter() - start
    rows = result.outcome.rows
    rate = throughput(rows)
    states = {}
    for row in rows:
        states[row.state] = states.get(row.state, 0) + 1
    best = result.outcome.best()
    repeated = sum(1 for r in rows if r.result.get("repeated"))
    measured = None if not rate["span_s"] else 60.0 * (rate["trials"] - repeated) / rate["span_s"]
    figures = {"record": path, "kernel": result.outcome.record.kernel.name, "arch": result.outcome.arch,
               "preset": args.preset, "sampler": args.sampler, "trials_asked": args.trials, "states": states,
               "repeated": repeated, **rate, "measured_per_minute": measured, "total_s": total,
               "recorded_ms": result.outcome.recorded_ms, "best_ms": best.ms if best else None}
    if args.results_dir:
        from kir.tune.results import write_results
        write_results([result], args.results_dir, config=vars(args))
    if args.json:
        print(json.dumps(figures))
        return 0

    def fmt(value, spec):
        return "-" if value is None else format(value, spec)
    print(f"record              {path} ({figures['kernel']}, {figures['arch'] or '?'})")
    print(f"trials              {rate['trials']} finished of {args.trials} ({states}; {figures['repeated']} "
          "points measured before)")
    print(f"trials/min          {fmt(rate['trials_per_minute'], '.1f')}  (over {fmt(rate['span_s'], '.1f')} s; "
          f"the whole call {total:.1f} s); points measured/min {fmt(measured, '.1f')} (repeats left out)")
    print(f"per trial, mean     wall {fmt(rate['mean_wall_s'], '.3f')} s = compile {fmt(rate['mean_compile_s'], '.3f')}"
          f" + run {fmt(rate['mean_run_s'], '.3f')} + overhead {fmt(rate['mean_overhead_s'], '.3f')} s")
    print(f"overhead/trial      {fmt(rate['mean_overhead_s'], '.4f')} s beyond compiling and running")
    print(f"recorded / best     {fmt(figures['recorded_ms'], '.4f')} ms / {fmt(figures['best_ms'], '.4f')} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
