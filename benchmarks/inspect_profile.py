"""Where `kir inspect --kernels` spends its time, and how it scales with cores
(issue 15), on large real libraries: for each library and thread count,

  process     the whole command (`kir inspect --kernels -j N LIB > /dev/null`),
              interpreter start-up and imports included
  open        Binary.open and the image list (containers found, headers read)
  decode      Binary.load_code with N threads: every image decompressed, its ELF
              or PTX decoded, kernels and parameters, names demangled (the core)
  render      the text table (kir.report.render_table), Python
  decompress  every image decompressed and nothing else, N threads
              (Image.read releases the GIL): the limit `decode` can approach

and the ratios the issue asks for: decode(1)/decode(N) (scaling), decode(N) /
decompress(N) (how close to the decompression limit), process vs cuobjdump
-symbols when cuobjdump is on the PATH.

    python benchmarks/inspect_profile.py [LIB ...] [--threads 1,4,16] [--repeat 3]

Without LIB: libtorch_cuda.so (PyTorch) and libcublasLt (the nvidia-cublas wheel
PyTorch depends on), when installed; else benchmarks/.cache/libcublasLt.so.13
(inspect_vs_cuobjdump.py fetches it).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kir
from kir.report import render_table

HERE = Path(__file__).resolve().parent


def default_libraries() -> list[Path]:
    found = []
    try:
        import torch
        lib = Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"
        if lib.exists():
            found.append(lib)
    except ImportError:
        pass
    try:
        import nvidia.cublas
        found += sorted(Path(list(nvidia.cublas.__path__)[0]).glob("lib/libcublasLt.so*"))[:1]
    except ImportError:
        pass
    cached = HERE / ".cache" / "libcublasLt.so.13"
    if not found and cached.exists():
        found.append(cached)
    return found


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def process_seconds(lib: Path, threads: int, repeat: int) -> float:
    command = [sys.executable, "-m", "kir", "inspect", "--kernels", "-j", str(threads), str(lib)]
    return timed(lambda: subprocess.run(command, stdout=subprocess.DEVNULL, check=True), repeat)


def profile(lib: Path, threads_list: list[int], repeat: int) -> None:
    binary = kir.open(lib)
    images = binary.images
    size = sum(i.size for i in images)
    print(f"\n{lib.name}: {lib.stat().st_size / 1e6:.0f} MB, {len(images)} images, {size / 1e9:.2f} GB decompressed")
    t_open = timed(lambda: kir.open(lib).images, repeat)
    rows = []
    for n in threads_list:
        def decode():
            b = kir.open(lib)
            b.load_code(b.images, n)
            return b
        t_decode = timed(decode, repeat)
        b = decode()
        codes = [i._code for i in b.images]  # as `kir inspect --kernels` hands them over
        t_render = timed(lambda: render_table(b, codes=codes), repeat)
        kernels = sum(len(c.kernel_rows()) for c in codes if c is not None)

        def decompress():
            with ThreadPoolExecutor(max_workers=n) as pool:
                list(pool.map(lambda i: len(i.read()), images))
        t_decompress = timed(decompress, repeat)
        t_process = process_seconds(lib, n, repeat)
        rows.append((n, t_process, t_open, t_decode, t_render, t_decompress, kernels))
    print(f"| threads | process s | open s | decode s | render s | decompress s | decode / decompress | kernels |")
    print("|---|---|---|---|---|---|---|---|")
    for n, p, o, d, r, z, k in rows:
        print(f"| {n} | {p:.2f} | {o:.3f} | {d:.2f} | {r:.2f} | {z:.2f} | {d / z:.2f} | {k} |")
    one = rows[0]
    for n, p, o, d, r, z, k in rows[1:]:
        print(f"scaling {one[0]} -> {n} threads: decode {one[3] / d:.2f}x, process {one[1] / p:.2f}x, "
              f"decompress {one[5] / z:.2f}x")
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        t = timed(lambda: subprocess.run([cuobjdump, "-symbols", str(lib)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL), 1)
        best = min(r[1] for r in rows)
        print(f"cuobjdump -symbols: {t:.2f} s; kir inspect --kernels (best): {best:.2f} s: {t / best:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("libs", nargs="*", type=Path)
    parser.add_argument("--threads", default=f"1,4,{os.cpu_count()}")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    libs = args.libs or default_libraries()
    if not libs:
        raise SystemExit("no library to profile: give one, or run inspect_vs_cuobjdump.py first")
    print(f"{os.cpu_count()} cores; medians of {args.repeat}")
    for lib in libs:
        profile(lib, threads, args.repeat)


if __name__ == "__main__":
    main()
