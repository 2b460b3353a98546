"""Kernel-object cache latency (results in benchmarks/RESULTS.md):

    python benchmarks/cache.py [--code CUBIN] [--dir DIR]

A C++ program (cache_latency.cpp) built against the installed kir package: the
in-memory hit of kir_cache_lookup (the launch path's repeated lookup; target
<= 100 ns), a fresh handle's first (disk) lookup, a miss, and a store. CODE
defaults to the test fixture kernels_sm90.cubin (tests/support/build.py); DIR
to a temporary directory on the machine's /tmp.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import kir

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "build" / "test-fixtures"


def default_code() -> Path:
    found = sorted(FIXTURE.rglob("kernels_sm90.cubin"))
    if not found:
        raise SystemExit(f"no kernels_sm90.cubin under {FIXTURE}: run `python tests/support/build.py "
                         f"{FIXTURE}` or pass --code")
    return found[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="the device code to store (a cubin)")
    parser.add_argument("--dir", type=Path, help="cache directory (default: a fresh temporary)")
    args = parser.parse_args()
    prefix = Path(kir.__file__).parent
    work = Path(tempfile.mkdtemp())
    exe = work / "cache_latency"
    libs = [str(prefix / "lib" / "libkir.a"), "-lxxhash", "-lzstd", "-llz4", "-lz", "-pthread"]
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", str(prefix / "include"), str(HERE / "cache_latency.cpp"),
                    "-o", str(exe), *libs], check=True)
    code = args.code or default_code()
    directory = args.dir or work / "cache"
    out = subprocess.run([str(exe), str(code), str(directory)], capture_output=True, text=True, check=True).stdout
    print(f"{os.cpu_count()} cores, code {code.name} ({code.stat().st_size} bytes), cache in {directory}\n")
    print("| cache operation | latency |\n|---|---|")
    for line in out.splitlines():
        name, value, unit = line.split("\t")
        print(f"| {name} | {value} {unit} |")


if __name__ == "__main__":
    main()
