"""Launch overhead of the hook layer (needs a GPU): ns per empty-kernel launch,
bare vs under libkir_hook.so with no client and with a no-op client, measured as
interleaved pairs; prints the median ratio of each to the bare run of its pair.

    python benchmarks/hook_overhead.py [--pairs 15] [--launches 200000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import kir

HERE = Path(__file__).resolve().parent
# Counts the launches it is told about, and says how many at exit: the
# benchmark checks that the hook saw every launch (it measures nothing else).
NOOP_CLIENT = r"""
#include <stdio.h>
#include <kir/hooks.h>
static unsigned long long seen;
static void on_begin(void* u, const kir_hook_launch* l) { (void)u; (void)l; __atomic_fetch_add(&seen, 1, __ATOMIC_RELAXED); }
static void on_done(void* u, const kir_hook_launch* l) { (void)u; (void)l; }
static kir_hook_client client = {sizeof(kir_hook_client), KIR_HOOK_API_VERSION, 0,
                                 0, 0, 0, 0, 0, on_begin, on_done};
const kir_hook_client* kir_hook_client_entry(void) { return &client; }
__attribute__((destructor)) static void report(void) { fprintf(stderr, "noop-client launches=%llu\n", seen); }
"""


def build(work: Path) -> tuple[Path, Path]:
    exe, client = work / "launch", work / "libnoop.so"
    subprocess.run(["nvcc", "-O2", "-cudart", "shared", "-arch=native", str(HERE / "hook_overhead.cu"),
                    "-o", str(exe)], check=True)
    (work / "noop.c").write_text(NOOP_CLIENT)
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", str(Path(kir.__file__).parent / "include"),
                    str(work / "noop.c"), "-o", str(client)], check=True)
    return exe, client


def ns_per_launch(exe: Path, launches: int, env: dict) -> float:
    run = subprocess.run([str(exe), str(launches)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    if "KIR_HOOK_CLIENTS" in env:  # the hook must have seen every launch (1000 warm-up + n)
        seen = run.stderr.split("noop-client launches=")[-1].split()[0]
        if int(seen) != launches + 1000:
            raise SystemExit(f"the hook saw {seen} of {launches + 1000} launches: nothing is measured")
    return float(run.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--launches", type=int, default=200000)
    args = parser.parse_args()
    exe, client = build(Path(tempfile.mkdtemp()))
    hook = str(Path(kir.__file__).parent / "lib" / "libkir_hook.so")
    variants = {"hook, no client": {"LD_PRELOAD": hook},
                "hook + no-op client": {"LD_PRELOAD": hook, "KIR_HOOK_CLIENTS": str(client)}}
    bare, ratios = [], {name: [] for name in variants}
    for _ in range(args.pairs):
        for name, env in variants.items():
            b = ns_per_launch(exe, args.launches, {})
            h = ns_per_launch(exe, args.launches, env)
            bare.append(b)
            ratios[name].append(h / b)
    print(f"| launches of an empty kernel ({args.pairs} interleaved pairs x {args.launches}) | ns/launch | overhead (median of pair ratios) |")
    print("|---|---|---|")
    print(f"| bare | {statistics.median(bare):.0f} | - |")
    for name, r in ratios.items():
        print(f"| {name} | {statistics.median(bare) * statistics.median(r):.0f} | "
              f"{(statistics.median(r) - 1) * 100:+.2f}% |")


if __name__ == "__main__":
    main()
