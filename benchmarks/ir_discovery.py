"""IR discovery: `kir inspect --ir` vs `llvm-objdump --offloading`, side by side.

    python benchmarks/ir_discovery.py [--units N] [--repeat N]

1. Many translation units: N OpenMP-offload objects (clang-22, gfx90a), each with
   its own `.llvm.offloading` binary, merged by `ld -r` into one object (N
   offloading binaries back to back in one section) — both tools apply.
2. A large real binary: libnvJitLink.so.13 (nvidia-nvjitlink 13.5.37, 117 MB),
   whose LLVM bitcode lies in `.rodata` as plain data: only `kir inspect --scan
   --ir` finds it (llvm-objdump --offloading reports nothing there).

Whole processes; median wall time and peak RSS (GNU time). llvm-objdump
--offloading may write images to files: it runs in a scratch directory. It lists
offloading images; `kir inspect --ir` also reads every module with llvmlite.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, kir_command, measure, require_gnu_time, row  # noqa: E402

SOURCE = """
int unit_{i}(int n) {{
  int sum = 0;
#pragma omp target map(tofrom : sum)
  for (int j = 0; j < n; ++j) sum += j * {i};
  return sum;
}}
"""


def many_units(count: int) -> Path:
    """`ld -r` of `count` OpenMP offload objects (cached)."""
    out = CACHE / f"omp_units_{count}.o"
    if out.exists():
        return out
    work = Path(tempfile.mkdtemp(prefix="kir-units-"))

    def build(i: int) -> Path:
        src, obj = work / f"u{i}.c", work / f"u{i}.o"
        src.write_text(SOURCE.format(i=i))
        subprocess.run(["clang-22", "-fopenmp", "--offload-arch=gfx90a", "-nogpulib", "-O1", "-c",
                        src, "-o", obj], check=True)
        return obj

    with ThreadPoolExecutor() as pool:
        objects = list(pool.map(build, range(count)))
    CACHE.mkdir(exist_ok=True)
    subprocess.run(["ld", "-r", *objects, "-o", out], check=True)
    shutil.rmtree(work)
    return out


def nvjitlink() -> Path:
    target = CACHE / "libnvJitLink.so.13"
    if not target.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "nvidia-nvjitlink==13.5.37", "-d", CACHE], check=True)
        wheel = next(CACHE.glob("nvidia_nvjitlink-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            name = next(n for n in z.namelist() if n.endswith("/libnvJitLink.so.13"))
            target.write_bytes(z.read(name))
        wheel.unlink()
    return target


def objdump(binary: Path, scratch: Path) -> list[str]:
    copy = scratch / binary.name
    if not copy.exists():
        shutil.copy(binary, copy)
    return ["sh", "-c", f"cd {scratch} && llvm-objdump-22 --offloading {copy.name}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    require_gnu_time()
    kir = kir_command()
    units = many_units(args.units)
    scratch = Path(tempfile.mkdtemp(prefix="kir-objdump-"))
    print(f"{args.units} translation units in {units.name} ({units.stat().st_size / 1e6:.1f} MB); "
          f"repeats: {args.repeat}\n")
    print("| task | kir | llvm-objdump | kir faster | kir peak RSS | llvm-objdump peak RSS | kir smaller |")
    print("|---|---|---|---|---|---|---|")
    theirs = measure(objdump(units, scratch), args.repeat)
    listing = measure([*kir, "inspect", str(units)], args.repeat)
    with_ir = measure([*kir, "inspect", "--ir", str(units)], args.repeat)
    print(row("list offloading images: `kir inspect` vs `llvm-objdump --offloading`", listing, theirs))
    print(row("images + every module read: `kir inspect --ir` vs `llvm-objdump --offloading`",
              with_ir, theirs))
    report = json.loads(subprocess.run([*kir, "inspect", "--ir", "--json", str(units)],
                                       capture_output=True, text=True, check=True).stdout)
    listed = theirs[2].count("OFFLOADING IMAGE")
    print(f"\nimages: kir {len(report['images'])}, llvm-objdump {listed}; "
          f"IR modules read by kir: {len(report['ir_modules'])}, unreadable: "
          f"{sum(1 for m in report['ir_modules'] if m['error'])}")

    large = nvjitlink()
    print(f"\n{large.name} ({large.stat().st_size / 1e6:.0f} MB): llvm-objdump --offloading "
          "finds no offloading section; kir alone:\n")
    print("| task | kir | peak RSS |\n|---|---|---|")
    for task, command in (("`kir inspect --scan`", [*kir, "inspect", "--scan", str(large)]),
                          ("`kir inspect --scan --ir`", [*kir, "inspect", "--scan", "--ir", str(large)])):
        wall, rss, _ = measure(command, args.repeat)
        print(f"| {task} | {wall:.3f} s | {rss / 1024:.0f} MiB |")
    report = json.loads(subprocess.run([*kir, "inspect", "--scan", "--ir", "--json", str(large)],
                                       capture_output=True, text=True, check=True).stdout)
    print(f"\nIR modules found: {len(report['ir_modules'])} "
          f"({sum(m['size'] for m in report['ir_modules'])} bytes), triples "
          f"{sorted({m['triple'] for m in report['ir_modules']})}")
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
