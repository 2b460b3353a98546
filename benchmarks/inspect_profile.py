"""Where `kir inspect --kernels` spends its time, and how it scales with cores
(issue 15), on large real libraries: for each library and thread count,

  process     the whole command (`kir inspect --kernels -j N LIB > /dev/null`),
              interpreter start-up and imports included
  open        Binary.open and the image list (containers found, headers read)
  load_code   Binary.load_code with N threads, from Python (the core's decode and
              the DeviceCode objects handed over)
  render      the text table (kir.report.render_table), Python
  decode      the core alone (decode_limit.cpp, C++): Binary::device_code_of with
              N threads: every image decompressed, its ELF or PTX decoded, kernels
              and parameters, names demangled
  decompress  the same program: every image decompressed (kir::decode_image into a
              per-thread buffer) and nothing else, N threads: the limit `decode`
              can approach

the same command with --json at the most threads, and the ratios the issue asks for: decode(1)/decode(N) (scaling), decode(N) /
decompress(N), and decode(N) against the single-thread decompression sum divided
by N ("within 1.5x of the sum of the images' decompression time divided by the
cores"); process vs cuobjdump -symbols when cuobjdump is on the PATH. Then the
listing (`kir inspect LIB`, no kernels) against `cuobjdump -lelf` and against the
interpreter's own start-up (`python -c pass`).

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
import tempfile
import time
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


def decode_limit_program() -> Path:
    """decode_limit.cpp built against the installed kir package (its static libkir)."""
    prefix = Path(kir.__file__).parent
    exe = Path(tempfile.mkdtemp(prefix="kir-decode-limit-")) / "decode_limit"
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", str(prefix / "include"), str(HERE / "decode_limit.cpp"),
                    "-o", str(exe), str(prefix / "lib" / "libkir.a"), "-lxxhash", "-lzstd", "-llz4", "-lz",
                    "-lpthread"], check=True)
    return exe


def core_times(exe: Path, lib: Path, threads_list: list[int], repeat: int) -> dict[int, tuple[float, float]]:
    """{threads: (decompress s, decode s)} from decode_limit."""
    out = subprocess.run([str(exe), str(lib), ",".join(map(str, threads_list)), str(repeat)], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    times = {}
    for line in out[1:]:
        n, decompress, decode, *_ = line.split("\t")
        times[int(n)] = (float(decompress), float(decode))
    return times


def profile(lib: Path, threads_list: list[int], repeat: int, exe: Path) -> None:
    binary = kir.open(lib)
    images = binary.images
    size = sum(i.size for i in images)
    print(f"\n{lib.name}: {lib.stat().st_size / 1e6:.0f} MB, {len(images)} images, {size / 1e9:.2f} GB decompressed")
    t_open = timed(lambda: kir.open(lib).images, repeat)
    core = core_times(exe, lib, threads_list, repeat)
    rows = []
    for n in threads_list:
        def load(n=n):
            b = kir.open(lib)
            b.load_code(b.images, n)
            return b
        t_load = timed(load, repeat)
        b = load()
        codes = [i._code for i in b.images]  # as `kir inspect --kernels` hands them over
        t_render = timed(lambda b=b, codes=codes: render_table(b, codes=codes), repeat)
        kernels = sum(len(c.kernel_rows()) for c in codes if c is not None)
        t_process = process_seconds(lib, n, repeat)
        rows.append((n, t_process, t_open, t_load, t_render, *core[n], kernels))
    serial_decompress = core[threads_list[0]][0] * threads_list[0]  # the sum, from the fewest threads
    print("| threads | process s | open s | load_code s | render s | decode s (core) | decompress s (core) "
          "| decode / decompress | decode / (decompression sum / threads) | kernels |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, p, o, l, r, z, d, k in rows:
        print(f"| {n} | {p:.2f} | {o:.3f} | {l:.2f} | {r:.2f} | {d:.3f} | {z:.3f} | {d / z:.2f} "
              f"| {d / (serial_decompress / n):.2f} | {k} |")
    one = rows[0]
    for n, p, o, l, r, z, d, k in rows[1:]:
        print(f"scaling {one[0]} -> {n} threads: decode {one[6] / d:.2f}x, decompress {one[5] / z:.2f}x, "
              f"process {one[1] / p:.2f}x")
    most = threads_list[-1]
    t_json = timed(lambda: subprocess.run([sys.executable, "-m", "kir", "inspect", "--kernels", "--json", "-j",
                                           str(most), str(lib)], stdout=subprocess.DEVNULL, check=True), repeat)
    print(f"kir inspect --kernels --json -j {most}: {t_json:.2f} s (the table: {rows[-1][1]:.2f} s)")
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        t = timed(lambda: subprocess.run([cuobjdump, "-symbols", str(lib)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL), 1)
        best = min(r[1] for r in rows)
        print(f"cuobjdump -symbols: {t:.2f} s; kir inspect --kernels (best): {best:.2f} s: {t / best:.2f}x")
    listing(lib, repeat)


def listing(lib: Path, repeat: int) -> None:
    """`kir inspect LIB` (the image table, nothing decoded) against cuobjdump -lelf,
    and the interpreter's start-up alone (`python -c pass`, the floor of any Python
    command), each the median of `repeat` processes."""
    kir_s = timed(lambda: subprocess.run([sys.executable, "-m", "kir", "inspect", str(lib)],
                                         stdout=subprocess.DEVNULL, check=True), repeat)
    floor = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), repeat)
    line = (f"listing: kir inspect {kir_s * 1000:.0f} ms (the interpreter alone: {floor * 1000:.0f} ms; "
            f"kir's part {(kir_s - floor) * 1000:.0f} ms)")
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        t = timed(lambda: subprocess.run([cuobjdump, "-lelf", str(lib)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL), 1)
        line += (f"; cuobjdump -lelf {t:.2f} s: {t / kir_s:.0f}x the whole command, "
                 f"{t / (kir_s - floor):.0f}x kir's part")
    print(line)


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
    exe = decode_limit_program()
    for lib in libs:
        profile(lib, threads, args.repeat, exe)


if __name__ == "__main__":
    main()
