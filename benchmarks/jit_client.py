"""The JIT client's cost per launch on a hit (needs a GPU): tests/fixtures/jit_app
(a Proteus-layout app: daxpy with `a` a runtime constant) launching a one-block
daxpy many times, under the hook alone vs under the hook with libkir_jit.so and a
cache holding the launch's specialization (filled first by `kir jit compile`):
every launch then pays the JIT key, the cache lookup and the override, and runs
the cached cubin the layer loaded once. Host nanoseconds per launch, interleaved
pairs; prints the median difference and ratio, and the client's own timing of
key + lookup (1 launch in 64).

    python benchmarks/jit_client.py [--pairs 9] [--launches 100000]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import kir
from kir.jit.client import client_environment

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
import build as fixture_build  # noqa: E402
from common import pin_to  # noqa: E402


def host_ns(app: Path, launches: int, env: dict, cpu: int | None = None) -> tuple[float, str]:
    run = subprocess.run([str(app), str(launches), "2.5", "256"], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, preexec_fn=pin_to(cpu))
    found = re.search(r"host ([0-9.]+) ns per launch", run.stderr)
    if not found:
        raise SystemExit(f"jit_app said no time: {run.stderr[-500:]}")
    return float(found.group(1)), run.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--launches", type=int, default=100000)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--cpu", type=int, default=-1,
                        help="run every process on this CPU alone (default -1: anywhere; pinned, the CUDA "
                             "driver's own threads share the core: on the H200 the pairs moved more, run Z6)")
    args = parser.parse_args()
    app = fixture_build.build_all(HERE.parent / "build" / "test-fixtures")["jit_app"]
    work = Path(tempfile.mkdtemp())
    cache = work / "cache"
    subprocess.run([sys.executable, "-m", "kir", "jit", "compile", str(app), "--kernel", "daxpy", "--arch", args.arch,
                    "--arg", "1:f64:2.5", "--cache", str(cache)], check=True, capture_output=True)
    hook = str(Path(kir.__file__).parent / "lib" / "libkir_hook.so")
    jit = str(Path(kir.__file__).parent / "lib" / "libkir_jit.so")
    stats = work / "stats.json"
    alone = {"LD_PRELOAD": hook}
    client = {"LD_PRELOAD": hook, "KIR_HOOK_CLIENTS": jit, **client_environment(cache, stats=stats)}
    base, with_client, diffs, ratios, added = [], [], [], [], []
    for _ in range(args.pairs):
        a, out_a = host_ns(app, args.launches, alone, args.cpu)
        b, out_b = host_ns(app, args.launches, client, args.cpu)
        s = json.loads(stats.read_text())
        if s["hits"] != args.launches or out_a != out_b:
            raise SystemExit(f"not every launch hit ({s['hits']} of {args.launches}) or the output changed")
        base.append(a)
        with_client.append(b)
        diffs.append(b - a)
        ratios.append(b / a)
        added.append(s["added_ns_per_launch"])
    where = "anywhere" if args.cpu < 0 else f"each process on CPU {args.cpu}"
    print(f"| one-block daxpy launches ({args.pairs} interleaved pairs x {args.launches}, {where}) | host ns/launch |")
    print("|---|---|")
    print(f"| hook alone | {statistics.median(base):.0f} |")
    print(f"| hook + JIT client, every launch a cache hit (substituted) | {statistics.median(with_client):.0f} |")
    print(f"| difference (median of pair differences) | {statistics.median(diffs):+.0f} ns "
          f"({(statistics.median(ratios) - 1) * 100:+.2f}%; pairs {min(diffs):+.0f} … {max(diffs):+.0f} ns) |")
    print(f"| the client's key + lookup (its own clock, median of runs) | {statistics.median(added):.0f} ns |")


if __name__ == "__main__":
    main()
