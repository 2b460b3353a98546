"""A tuned result every client finds (issue 24, done-when): record a kernel of
benchmarks/jit_speedup.cu's app, `kir tune` it into a JIT cache that the Proteus-style
client (examples/proteus_client) has declared itself in, bitwise and under a ULP
tolerance, then run the app under kir's reference client (`kir run --no-compile`) and
under the Proteus-style client with that cache: each must find the tuned entry (a hit,
no compile of its own) and run it.

    python benchmarks/tune_handoff.py run build/jit_speedup --client-lib LIB [--kernels stencil] \
        [--trials 30] [--ulp 4] > table.md          # on the GPU host

DIR is `python benchmarks/jit_speedup.py build DIR`'s output; LIB the Proteus-style client
(docs/adopting-proteus.md). Per kernel and tolerance: the hand-off (its trial, its point,
its speedup in the tuner's replay), how many trials were pruned as mismatches, and the app's
µs per launch (CUDA events in the app, the median of --repeats runs) under each client,
with the speedup over the AOT build and whether the output is bitwise AOT's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jit_speedup import KERNELS, app_run, kir, median_run, sh  # noqa: E402


def declare_proteus_client(app: Path, name: str, lib: Path, work: Path) -> Path:
    """A cache holding nothing but the Proteus-style client's descriptor, which the client
    writes when it runs (DIR/.jit/clients/proteus-client.json)."""
    own = work / "proteus-own"
    proteus_run(app, name, 3, lib, own)
    cache = work / "empty"
    shutil.copytree(own / ".jit" / "clients", cache / ".jit" / "clients")
    return cache


def proteus_run(app: Path, name: str, launches: int, lib: Path, cache: Path) -> tuple[float, str, dict]:
    import kir.app
    stats = cache.parent / f"{cache.name}-stats.json"
    env = {"LD_PRELOAD": str(kir.app.hook_library()), "KIR_HOOK_CLIENTS": str(lib), "PROTEUS_CACHE_DIR": str(cache),
           "PROTEUS_CLIENT_STATS": str(stats)}
    us, checksum, _, _ = app_run([app, name, launches], env)
    return us, checksum, json.loads(stats.read_text())


def tune(record: Path, cache: Path, trials: int, tolerance: list[str]) -> dict:
    proc = sh(kir("tune", record, "--trials", trials, "--seed", 1, "--jit-cache", cache, "--json", "--no-progress",
                  *tolerance))
    (result,) = json.loads(proc.stdout)["records"]
    return result


def run(directory: Path, lib: Path, names: list[str], trials: int, ulp: int, launches: int, repeats: int) -> None:
    app = directory / "app"
    work = Path(tempfile.mkdtemp(prefix="kir-handoff-"))
    print("| kernel | verification | hand-off (tuner) | mismatches | client | µs/launch | speedup | hits | "
          "own compiles | output |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        kernel, _ = KERNELS[name]
        w = work / name
        w.mkdir(parents=True)
        aot_us, aot_sum = median_run([app, name, launches], repeats)
        record_dir = w / "rec"
        sh(kir("record", "--kernels", kernel, "--max-per-kernel", 1, "-o", record_dir, "--", app, name, 3))
        (record,) = sorted((record_dir / "records").glob("*.kirrec"))
        empty = declare_proteus_client(app, name, lib, w)
        for label, tolerance in (("bitwise", []), (f"ulp {ulp}", ["--ulp", str(ulp)])):
            cache = w / f"cache-{label.replace(' ', '')}"
            shutil.copytree(empty, cache)
            result = tune(record, cache, trials, tolerance)
            mismatches = sum(t["result"].get("status") == "mismatch" for t in result["trials"])
            by_client = {h["client"]: h for h in result["handoffs"]}
            h = result["handoff"]
            said = (f"trial {h.get('trial')}, {h.get('description')}, {h['speedup']:.2f}× (replay)"
                    if h.get("speedup") else f"none: {h.get('reason', '')}")
            stored = ", ".join(f"{c}: {'stored' if v.get('stored') else v.get('reason', 'not stored')}"
                               for c, v in by_client.items())
            runs = []
            us, checksum = median_run(kir("run", "--jit-cache", cache, "--no-compile", "--", app, name, launches),
                                      repeats)
            runs.append(("kir run (reference)", us, checksum, "all", "0"))
            results = [proteus_run(app, name, launches, lib, cache) for _ in range(repeats)]
            pus = statistics.median(r[0] for r in results)
            stats = results[0][2]
            runs.append(("proteus-client", pus, results[0][1], str(stats.get("hits")), str(stats.get("compiles"))))
            for client, us, checksum, hits, compiles in runs:
                print(f"| {name} | {label} | {said}; {stored} | {mismatches} of {len(result['trials'])} | {client} | "
                      f"{us:.1f} | {aot_us / us:.2f}× | {hits} | {compiles} | "
                      f"{'bitwise' if checksum == aot_sum else 'differs'} |")
        print(f"| {name} | AOT (clang -O3) | | | | {aot_us:.1f} | 1.00× | | | |")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("directory", type=Path)
    r.add_argument("--client-lib", type=Path, default=os.environ.get("PROTEUS_CLIENT_LIB"), required=False)
    r.add_argument("--kernels", default="stencil")
    r.add_argument("--trials", type=int, default=30)
    r.add_argument("--ulp", type=int, default=4)
    r.add_argument("--launches", type=int, default=200)
    r.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not args.client_lib:
        parser.error("--client-lib (or PROTEUS_CLIENT_LIB): the Proteus-style client")
    run(args.directory.resolve(), args.client_lib.resolve(), args.kernels.split(","), args.trials, args.ulp,
        args.launches, args.repeats)


if __name__ == "__main__":
    main()
