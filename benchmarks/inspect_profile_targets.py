"""Where `kir inspect` spends its time on issue 26's two targets (benchmarks/inspect_targets.py):
kir.open with and without the data-section search, and the whole command under cProfile.

    python benchmarks/inspect_profile_targets.py LIBDIR
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import kir
from kir.cli import main

directory = Path(sys.argv[1])
files = sorted(p for p in directory.iterdir() if p.name.startswith(("libcublas", "libcufft", "libnvJitLink"))
               and ".so" in p.name and not p.is_symlink())
for path in files:
    for scan_data in (True, False):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            kir.open(str(path), scan_data=scan_data)
            times.append(time.perf_counter() - start)
        best = min(times)
        print(f"kir.open({path.name}, scan_data={scan_data}): {best * 1e3:.1f} ms")
for argv in (["inspect", "--json", str(directory / "libcublasLt.so.13")],
             ["inspect", "-q", "--require", "sm_90", *map(str, files)]):
    profile = cProfile.Profile()
    with redirect_stdout(io.StringIO()):
        profile.runcall(main, argv)
    print(f"\n== kir {' '.join(argv[:3])} ...")
    pstats.Stats(profile).sort_stats("tottime").print_stats(8)
