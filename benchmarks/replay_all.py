"""Regression-run throughput on GPUs (needs one; more to see the fan-out): records
replayed per minute by `kir replay --all DIR`

  - in this process (no Dask),
  - on 1 Dask worker (`--workers 1`: the fan-out's own cost),
  - on one worker per GPU (`--workers`), ideally ≈ GPUs × the 1-worker rate,

each run `--rounds` times (median). The rate is kir's `summary.records_per_minute`
(records over the time from the first submission to the last row; the cluster's
start is reported apart, `cluster.start_seconds`). Every record must pass: a run
with a failed or error row stops the benchmark.

The recording is DIR (`--dir`, e.g. a real app's), or made here: the record
fixture apps of tests/fixtures/record_apps built with nvcc and recorded with
`kir record --max-per-kernel 0` (every distinct launch).

    python benchmarks/replay_all.py [--dir REC] [--rounds 3] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import kir_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APPS = ["rec_vector_add", "rec_jacobi", "rec_pointer_chase", "rec_device_global", "rec_same_kernel_args"]


def make_recording(out: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import build as fixture_build
    built = fixture_build.build_all(ROOT / "build" / "test-fixtures")
    for name in APPS:
        proc = subprocess.run([*kir_command(), "record", "--max-per-kernel", "0", "-o", str(out), "--",
                               str(built[name])], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"kir record {name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return out


def replay_all(directory: Path, repeat: int, *extra: str) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([*kir_command(), "replay", "--all", str(directory), "--json", "--repeat", str(repeat),
                           *extra], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"kir replay --all {' '.join(extra)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout)
    out["wall_seconds"] = wall
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="an existing recording (default: record the fixture apps)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration (median)")
    parser.add_argument("--repeat", type=int, default=1, help="launches per record (kir replay --repeat)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kir-replay-all-") as work:
        directory = args.dir or make_recording(Path(work) / "rec")
        configurations = {"in this process": [], "1 worker": ["--workers", "1"], "one worker per GPU": ["--workers"]}
        rows = []
        for label, extra in configurations.items():
            runs = [replay_all(directory, args.repeat, *extra) for _ in range(args.rounds)]
            cluster = runs[-1]["cluster"]
            rows.append((label, cluster["workers"], cluster["kind"], runs[-1]["summary"]["records"],
                         statistics.median(r["summary"]["records_per_minute"] for r in runs),
                         statistics.median(r["cluster"].get("start_seconds", 0.0) for r in runs),
                         statistics.median(r["wall_seconds"] for r in runs)))
    print(f"{'configuration':<20} {'workers':>7} {'cluster':<17} {'records':>7} {'records/min':>12} "
          f"{'start s':>8} {'wall s':>7}")
    for label, workers, kind, records, rate, start, wall in rows:
        print(f"{label:<20} {workers:>7} {kind:<17} {records:>7} {rate:>12.1f} {start:>8.2f} {wall:>7.2f}")
    one = rows[1][4]
    print(f"speed-up of {rows[2][1]} workers over 1: {rows[2][4] / one:.2f}x" if one else "")


if __name__ == "__main__":
    main()
