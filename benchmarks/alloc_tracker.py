"""Allocation-tracker lookup cost (issue 5), CPU only (results in benchmarks/RESULTS.md):

    python benchmarks/alloc_tracker.py [--lookups N] [--threads T]

Builds alloc_tracker.cpp against the installed kir package's libkir_hook.so and,
for 10^3..10^5 live allocations, prints ns per track, per lookup (one thread and
T threads at once) and per untrack, beside a linear scan of the same list — what
a tracker without an index pays — as a ratio.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import kir

HERE = Path(__file__).resolve().parent


def build(out: Path) -> Path:
    package = Path(kir.__file__).parent
    exe = out / "alloc_tracker"
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", str(package / "include"), str(HERE / "alloc_tracker.cpp"),
                    "-o", str(exe), "-L", str(package / "lib"), "-lkir_hook",
                    f"-Wl,-rpath,{package / 'lib'}", "-pthread"], check=True)
    return exe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        print(f"| live allocations | track ns | lookup ns (1 thread) | lookup ns ({args.threads} threads, per lookup) "
              "| untrack ns | linear scan ns | scan / lookup |")
        print("|---|---|---|---|---|---|---|")
        for live in (1_000, 10_000, 100_000):
            out = subprocess.run([str(exe), str(live), str(args.lookups), str(args.threads)],
                                 capture_output=True, text=True, check=True).stdout.split()
            n, track, find, concurrent, scan, untrack = (float(x) for x in out)
            print(f"| {int(n):,} | {track:.0f} | {find:.0f} | {concurrent:.0f} | {untrack:.0f} | {scan:.0f} "
                  f"| {scan / find:.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
