"""kir inspect vs cuobjdump, side by side in one run, on a large real library.

    python benchmarks/inspect_vs_cuobjdump.py [--binary PATH] [--repeat N] [--venv]

Without --binary it fetches `libcublasLt.so.13` from the PyPI wheel `nvidia-cublas`
into benchmarks/.cache/. Each command runs as a whole process (interpreter start-up
and imports count); wall time is the median of the repeats, peak memory the largest
resident set (ru_maxrss of the child). Prints a markdown table with ratios, and the
image and kernel counts of both tools.

kir runs from the interpreter running this script; with --venv, also from a fresh
virtual environment (benchmarks/.cache/venv, kir installed from this checkout),
whose start-up carries no site-packages `.pth` hooks of the host's.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE, clean_venv, kir_command, measure, require_gnu_time, row  # noqa: E402


def fetch_cublaslt() -> Path:
    target = CACHE / "libcublasLt.so.13"
    if target.exists():
        return target
    CACHE.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "nvidia-cublas",
                    "-d", str(CACHE)], check=True)
    wheel = next(CACHE.glob("nvidia_cublas-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("/libcublasLt.so.13"))
        with z.open(name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    wheel.unlink()
    return target


def find_cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import nvidia
    for base in nvidia.__path__:
        for candidate in Path(base).glob("cu*/bin/cuobjdump"):
            return str(candidate)
    sys.exit("cuobjdump not found: pip install nvidia-cuda-cuobjdump")


def cuobjdump_image_count(text: str) -> dict[str, int]:
    counts = {"cubin": 0, "ptx": 0}
    for line in text.splitlines():
        if line.startswith("ELF file"):
            counts["cubin"] += 1
        elif line.startswith("PTX file"):
            counts["ptx"] += 1
    return counts


def cuobjdump_kernels(text: str) -> tuple[int, set[str]]:
    """(kernel entries over all cubins, distinct names) from -symbols output."""
    total, names = 0, set()
    in_elf = False
    for line in text.splitlines():
        if line.startswith("Fatbin "):
            in_elf = line.startswith("Fatbin elf")
        elif in_elf and line.startswith("FUNC") and re.search(r"\sENTRY\s", line):
            total += 1
            names.add(line.split()[-1])
    return total, names


def kir_counts(report: dict) -> tuple[dict[str, int], int, set[str]]:
    images = {"cubin": 0, "ptx": 0}
    total, names = 0, set()
    for image in report["images"]:
        images[image["kind"]] = images.get(image["kind"], 0) + 1
        if image["kind"] == "cubin" and "kernels" in image:
            total += len(image["kernels"])
            names.update(k["name"] for k in image["kernels"])
    return images, total, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, help="default: libcublasLt.so.13 from nvidia-cublas")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--venv", action="store_true", help="also run kir from a clean venv")
    args = parser.parse_args()
    require_gnu_time()
    binary = args.binary or fetch_cublaslt()
    cuobjdump, kir = find_cuobjdump(), kir_command(Path(sys.executable))
    venv_python = clean_venv() if args.venv else None
    print(f"binary: {binary} ({binary.stat().st_size / 1e6:.0f} MB), {os.cpu_count()} cores, "
          f"repeats: {args.repeat}\n")

    list_theirs = measure([cuobjdump, "-lelf", "-lptx", str(binary)], args.repeat)
    kern_theirs = measure([cuobjdump, "-symbols", str(binary)], args.repeat)
    pythons = [("", Path(sys.executable))] + ([(" (clean venv)", venv_python)] if venv_python else [])
    print("| task | kir | cuobjdump | kir faster | kir peak RSS | cuobjdump peak RSS | kir smaller |")
    print("|---|---|---|---|---|---|---|")
    floors = []
    for label, python in pythons:
        command = kir_command(python)
        list_ours = measure([*command, "inspect", str(binary)], args.repeat)
        kern_ours = measure([*command, "inspect", "--kernels", str(binary)], args.repeat)
        cubin_ours = measure([*command, "inspect", "--kernels", "--kind", "cubin", str(binary)],
                             args.repeat)
        print(row(f"list images{label}: `kir inspect` vs `cuobjdump -lelf -lptx`",
                  list_ours, list_theirs))
        print(row(f"list kernels{label}: `kir inspect --kernels` vs `cuobjdump -symbols`",
                  kern_ours, kern_theirs))
        print(row(f"list cubin kernels{label}: `kir inspect --kernels --kind cubin` vs "
                  "`cuobjdump -symbols`", cubin_ours, kern_theirs))
        floors.append((label, measure([str(python), "-c", "pass"], args.repeat)))
    for label, floor in floors:
        print(f"\nPython start-up alone{label} (`python -c pass`): {floor[0]:.3f} s, "
              f"{floor[1] / 1024:.0f} MiB")

    report = json.loads(subprocess.run([*kir, "inspect", "--json", "--kernels", str(binary)],
                                       capture_output=True, text=True, check=True).stdout)
    images, kernels, names = kir_counts(report)
    their_images = cuobjdump_image_count(list_theirs[2])
    their_kernels, their_names = cuobjdump_kernels(kern_theirs[2])
    print("\n| count | kir | cuobjdump |")
    print("|---|---|---|")
    print(f"| cubin images | {images['cubin']} | {their_images['cubin']} |")
    print(f"| PTX images | {images['ptx']} | {their_images['ptx']} |")
    print(f"| other images (LTO-IR, unknown) | "
          f"{sum(v for k, v in images.items() if k not in ('cubin', 'ptx'))} | not listed |")
    print(f"| kernel entries in cubins | {kernels} | {their_kernels} |")
    print(f"| distinct kernel names | {len(names)} | {len(their_names)} |")
    if names != their_names:
        print(f"\nnames only kir has: {sorted(names - their_names)[:10]}")
        print(f"names only cuobjdump has: {sorted(their_names - names)[:10]}")


if __name__ == "__main__":
    main()
