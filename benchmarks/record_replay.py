"""Kernel record and replay on a GPU (needs one): what recording costs and keeps,
and what a replayed launch costs, each beside the native figure it should approach.

  (a) snapshot throughput: the bytes a record's prologue snapshot copied per second
      (its `stats`), against pinned device-to-host cudaMemcpy bandwidth (target ≥ 80%);
  (b) recording size over repeated launches of an iterative kernel that rewrites
      1/64 of its state each time: the recording directory (chunk dedup + zstd)
      against one full snapshot of every live allocation before and after each
      launch (target ≤ 1/3);
  (c) replay launch time: `Replayer.run(repeat=N)` median against the same launch
      in the app, timed there with CUDA events.

    python benchmarks/record_replay.py [--quick] [--dir DIR]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import kir_command  # noqa: E402

HERE = Path(__file__).resolve().parent
SM90 = ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
GIB = 1 << 30


def build(work: Path) -> Path:
    exe = work / "record_replay"
    subprocess.run(["nvcc", "-O2", "-cudart", "shared", *SM90, str(HERE / "record_replay.cu"), "-o", str(exe)],
                   check=True)
    return exe


def app(exe: Path, *args) -> str:
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=True).stdout


def value(output: str, key: str) -> float:
    for line in output.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[1])
    raise SystemExit(f"no '{key}' in the app's output:\n{output}")


def record(exe: Path, out: Path, kernel: str, *args, max_per_kernel: int = 4, env: dict | None = None) -> list:
    """Record `exe args` (only `kernel`) into `out`; its records (kir.record.Record), by ordinal."""
    import os

    from kir.record import Recording
    if out.exists():
        shutil.rmtree(out)
    proc = subprocess.run([*kir_command(), "record", "--kernels", kernel, "--max-per-kernel", str(max_per_kernel),
                           "-o", str(out), "--", str(exe), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"kir record failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    records = Recording(out).records()
    if not records:
        raise SystemExit(f"kir record wrote no records for {kernel}:\n{proc.stderr[-3000:]}")
    return sorted(records, key=lambda r: r.launch.ordinal)


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def size(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def snapshot_throughput(exe: Path, work: Path, mib: int, runs: int, copies: int) -> None:
    d2h = value(app(exe, "bandwidth", 1024 if mib >= 1024 else mib, copies), "d2h_gib_s")
    prologue, epilogue, whole = [], [], []
    for _ in range(runs):
        (rec,) = record(exe, work / "snapshot", "transform", "snapshot", mib, max_per_kernel=1)
        s = rec.stats
        prologue.append(s.prologue_bytes / GIB / s.prologue_seconds)
        epilogue.append(s.epilogue_bytes / GIB / s.epilogue_seconds)
        waited = s.prologue_seconds + s.epilogue_seconds + s.store_seconds
        whole.append((s.prologue_bytes + s.epilogue_bytes) / GIB / waited)
    live = s.prologue_bytes
    print(f"\n(a) snapshot throughput: `transform` over two {mib} MiB buffers of non-trivial floats "
          f"({size(live)} snapshotted), median of {runs} recordings\n")
    print("| copy | GiB/s | vs pinned D2H |")
    print("|---|---|---|")
    print(f"| cudaMemcpy D2H into cudaMallocHost memory ({min(mib, 1024)} MiB, best of {copies}) | {d2h:.2f} | - |")
    print(f"| record prologue (before the launch: {size(live)}) | {statistics.median(prologue):.2f} | "
          f"**{statistics.median(prologue) / d2h * 100:.0f}%** (target ≥ 80%; best run "
          f"{max(prologue) / d2h * 100:.0f}%) |")
    print(f"| record epilogue (after the launch: {size(s.epilogue_bytes)}) | {statistics.median(epilogue):.2f} | "
          f"{statistics.median(epilogue) / d2h * 100:.0f}% |")
    print(f"| whole record, until it is on disk (both snapshots stored: {s.store_seconds:.2f} s "
          f"after the app moved on) | {statistics.median(whole):.2f} | {statistics.median(whole) / d2h * 100:.0f}% |")
    print("\nThe app waits only for the prologue and epilogue rows: snapshots go to device scratch memory "
          "first (when it has room) and are copied to the host, hashed, compressed and written while the "
          "app runs on.")
    print(f"\nstored for the last recording: {size(s.stored_bytes)} "
          f"(prologue + epilogue {size(s.prologue_bytes + s.epilogue_bytes)})")


def writer_threads(exe: Path, work: Path, mib: int, runs: int, threads: list[int],
                   writeback: list[int] = (1,)) -> None:
    """The whole record until on disk (both snapshots copied, hashed, compressed and
    written) with KIR_RECORD_THREADS = each of `threads`, and KIR_RECORD_WRITEBACK =
    each of `writeback` (1: each chunk's writeback started at once; issue 15)."""
    d2h = value(app(exe, "bandwidth", 1024 if mib >= 1024 else mib, 5), "d2h_gib_s")
    print(f"\n(a2) the record's writer threads (KIR_RECORD_THREADS), `transform` over two {mib} MiB buffers, "
          f"median of {runs}; pinned D2H {d2h:.2f} GiB/s\n")
    print("| writer threads | early writeback | prologue GiB/s | epilogue GiB/s | store s (after the app moved on) "
          "| whole record GiB/s | vs pinned D2H | until durable GiB/s | vs pinned D2H | hash s | compress s "
          "| write s (thread-summed) | copy wait s | sync s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in threads:
        for wb in writeback:
            prologue, epilogue, store, whole, durable, parts = [], [], [], [], [], []
            for _ in range(runs):
                (rec,) = record(exe, work / "threads", "transform", "snapshot", mib, max_per_kernel=1,
                                env={"KIR_RECORD_THREADS": str(n), "KIR_RECORD_WRITEBACK": str(wb)})
                s = rec.stats
                prologue.append(s.prologue_bytes / GIB / s.prologue_seconds)
                epilogue.append(s.epilogue_bytes / GIB / s.epilogue_seconds)
                store.append(s.store_seconds)
                moved = (s.prologue_bytes + s.epilogue_bytes) / GIB
                whole.append(moved / (s.prologue_seconds + s.epilogue_seconds + s.store_seconds))
                durable.append(moved / (s.prologue_seconds + s.epilogue_seconds + s.store_seconds + s.sync_seconds))
                parts.append((s.store_hash_seconds, s.store_compress_seconds, s.store_write_seconds,
                              s.copy_wait_seconds, s.sync_seconds))
            w, d = statistics.median(whole), statistics.median(durable)
            cols = " | ".join(f"{statistics.median(p[i] for p in parts):.3f}" for i in range(5))
            print(f"| {n} | {'on' if wb else 'off'} | {statistics.median(prologue):.2f} | "
                  f"{statistics.median(epilogue):.2f} | {statistics.median(store):.3f} | {w:.2f} | "
                  f"{w / d2h * 100:.0f}% | {d:.2f} | {d / d2h * 100:.1f}% | {cols} |")


def recording_size(exe: Path, work: Path, mib: int, launches: int) -> None:
    out = work / "iterate"
    records = record(exe, out, "relax", "iterate", mib, launches, max_per_kernel=launches)
    if len(records) != launches:
        raise SystemExit(f"expected {launches} records of relax, got {len(records)}")
    baseline = sum(2 * sum(a.size for a in r.allocations if a.kind in ("device", "managed"))
                   + 2 * sum(g.size for g in r.globals) for r in records)
    stored = tree_bytes(out)
    chunks = tree_bytes(out / "chunks")
    print(f"\n(b) recording size: {launches} launches of `relax`, each rewriting 1/64 of a {mib} MiB state\n")
    print("| recording | bytes | vs full snapshots |")
    print("|---|---|---|")
    print(f"| full snapshot per launch (every live allocation, before + after) | {size(baseline)} | 1 |")
    print(f"| kir recording (chunk dedup + zstd): chunks {size(chunks)}, records {size(stored - chunks)} | "
          f"{size(stored)} | **1/{baseline / stored:.1f}** (target ≤ 1/3) |")
    print(f"\nchunk size {size(records[0].chunk_size)}; stats.stored_bytes summed: "
          f"{size(sum(r.stats.stored_bytes for r in records))}")


def replay_overhead(exe: Path, work: Path, mib: int, launches: int, repeat: int) -> None:
    from kir.replay import Replayer

    native = [value(app(exe, "native", mib, launches), "native_ms") for _ in range(3)]
    (rec,) = record(exe, work / "native", "transform", "native", mib, 1, max_per_kernel=1)
    from kir.replay import Variant
    rows = []
    for code in ("cubin", "ptx"):
        with Replayer(rec, code=code) as replayer:
            replayer.run(repeat=3)  # warm up: module load, first launch
            results = [replayer.run(repeat=repeat) for _ in range(3)]
            graph = [replayer.run(Variant(repeat=repeat, timing="graph")) for _ in range(3)]
        if not all(r.verified for r in results + graph):
            raise SystemExit(f"the {code} replay did not verify")
        rows.append((f"`Replayer.run(repeat={repeat})`, {code} (median of 3 calls)",
                     statistics.median(r.median_ms for r in results)))
        rows.append((f"`Replayer.run(Variant(repeat={repeat}, timing='graph'))`, {code}: launches back to back in a "
                     "CUDA graph, no Python per launch", statistics.median(r.median_ms for r in graph)))
    base = statistics.median(native)
    print(f"\n(c) replay launch time: `transform` over two {mib} MiB buffers\n")
    print("| launch | ms (median) | vs native |")
    print("|---|---|---|")
    print(f"| native, in the app (CUDA events per launch, median of {launches}, median of 3 runs) | {base:.4f} | - |")
    for label, ms in rows:
        print(f"| {label} | {ms:.4f} | **{ms / base:.2f}×** |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one recording per figure")
    parser.add_argument("--dir", type=Path, help="where recordings go (default: a temporary directory)")
    parser.add_argument("--threads", help="also (a2): the whole record with these KIR_RECORD_THREADS, e.g. 1,4,16")
    parser.add_argument("--writeback", default="1", help="(a2): with these KIR_RECORD_WRITEBACK, e.g. 1,0")
    parser.add_argument("--only", choices=("a", "a2", "b", "c"), help="run one part")
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="kir-record-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    exe = build(work)
    q = args.quick
    if args.only in (None, "a"):
        snapshot_throughput(exe, work, mib=256 if q else 1024, runs=1 if q else 3, copies=5 if q else 10)
    if args.threads and args.only in (None, "a2"):
        writer_threads(exe, work, 256 if q else 1024, 1 if q else 3, [int(t) for t in args.threads.split(",")],
                       [int(w) for w in args.writeback.split(",")])
    if args.only in (None, "b"):
        recording_size(exe, work, mib=64 if q else 256, launches=8 if q else 16)
    if args.only in (None, "c"):
        replay_overhead(exe, work, mib=16 if q else 64, launches=50 if q else 200, repeat=20 if q else 100)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
