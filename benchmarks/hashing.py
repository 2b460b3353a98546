"""Hashing benchmarks, in one run (results in benchmarks/RESULTS.md):

    python benchmarks/hashing.py [--binary PATH]

1. XXH3-128 over 1 GiB: kir (libkir, system libxxhash) vs the PyPI `xxhash`
   package's xxh3_128, both from Python on the same bytes object.
2. Dynamic-hash latency in ns per launch key, several shapes of key: a C++
   program (dynamic_hash_latency.cpp) built against the installed kir package.
3. Static hashes of every kernel of a large real binary (libcublasLt.so.13):
   `kir hash` vs `kir inspect --kernels` (the decoding both must do).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import xxhash

import kir
from kir import _core

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, kir_command, measure, require_gnu_time  # noqa: E402

HERE = Path(__file__).resolve().parent


def throughput(repeat: int = 5) -> None:
    data = os.urandom(1 << 20) * 1024  # 1 GiB
    rows = []
    for name, fn in (("kir.hashing.xxh3_128", lambda: _core.xxh3_128(data)),
                     ("xxhash.xxh3_128 (PyPI)", lambda: xxhash.xxh3_128(data).digest())):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        rows.append((name, len(data) / statistics.median(times) / 2**30))
    assert _core.xxh3_128(data).hex == xxhash.xxh3_128_hexdigest(data)
    print("| XXH3-128 over 1 GiB | GiB/s |\n|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:.2f} |")
    print(f"\nkir / PyPI xxhash: **{rows[0][1] / rows[1][1]:.2f}×**\n")


def latency() -> None:
    prefix = Path(kir.__file__).parent
    exe = Path(tempfile.mkdtemp()) / "latency"
    libs = [str(prefix / "lib" / "libkir.a"), "-lxxhash", "-lzstd", "-llz4", "-lz", "-lpthread"]
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", str(prefix / "include"),
                    str(HERE / "dynamic_hash_latency.cpp"), "-o", str(exe), *libs], check=True)
    print("| dynamic hash, key shape | ns per key |\n|---|---|")
    for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines():
        ns, name = line.split("\t")
        print(f"| {name} | {ns} |")
    print()


def static_hashes(binary: Path, repeat: int) -> None:
    require_gnu_time()
    command = kir_command()
    hashed = measure([*command, "hash", str(binary)], repeat)
    inspected = measure([*command, "inspect", "--kernels", str(binary)], repeat)
    kernels = len(hashed[2].splitlines())
    print(f"| {binary.name}: every kernel | wall | peak RSS |\n|---|---|---|")
    print(f"| `kir hash` ({kernels} kernel static hashes) | {hashed[0]:.2f} s | {hashed[1] / 1024:.0f} MiB |")
    print(f"| `kir inspect --kernels` | {inspected[0]:.2f} s | {inspected[1] / 1024:.0f} MiB |")
    print(f"\nhashing costs {hashed[0] / inspected[0]:.2f}× `kir inspect --kernels`")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, default=CACHE / "libcublasLt.so.13")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores\n")
    throughput()
    latency()
    if args.binary.exists():
        static_hashes(args.binary, args.repeat)
    else:
        print(f"{args.binary} missing: run benchmarks/inspect_vs_cuobjdump.py first to fetch it")


if __name__ == "__main__":
    main()
