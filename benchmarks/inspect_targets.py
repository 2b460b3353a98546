"""Issue 26's speed targets, kir and cuobjdump side by side in one run, best of N:

1. a CI check over a prefix: `kir inspect -q --require sm_90 FILES...` against
   `cuobjdump -lelf FILE` run on each file (the CI check a cuobjdump user writes);
   target: kir >= 100x faster;
2. one library: `kir inspect --json libcublasLt.so.13` against
   `cuobjdump -lelf -lptx libcublasLt.so.13`; target: kir >= 50x faster.

    python benchmarks/inspect_targets.py [--lib-dir DIR] [--repeat 3]

FILES are the shared objects of NVIDIA's cuBLAS, cuFFT and nvJitLink wheels
(libcublas*, libcufft*, libnvJitLink*) in DIR: by default the `nvidia/cu13/lib` of
the running interpreter's site-packages (on the GPU machine, PyTorch's), else they are
downloaded into benchmarks/.cache/. Each command is a whole process (interpreter
start-up counts); kir runs as `PYTHON -m kir` (--python, default the running interpreter).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CACHE  # noqa: E402

LIBRARIES = ("libcublas", "libcufft", "libnvJitLink")


def lib_dir(given: Path | None) -> Path:
    if given:
        return given
    try:
        import nvidia
        for base in nvidia.__path__:
            if list(Path(base, "cu13", "lib").glob("libcublasLt.so*")):
                return Path(base, "cu13", "lib")
    except ImportError:
        pass
    target = CACHE / "prefix"
    if not (target / "lib/python").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target / "lib/python"),
                        "--no-deps", "nvidia-cublas", "nvidia-cufft", "nvidia-nvjitlink"], check=True)
    return target / "lib/python/nvidia/cu13/lib"


def find_cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    from kir.sass import find_cuda_tool  # the nvidia-cuda-cuobjdump wheel's
    return str(find_cuda_tool("cuobjdump"))


def best(commands: list[list[str]], repeat: int) -> float:
    """The best of `repeat` runs of the commands one after the other (their total)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for command in commands:
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib-dir", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="the interpreter kir runs from (default: this one)")
    args = parser.parse_args()
    directory = lib_dir(args.lib_dir)
    files = sorted(p for p in directory.iterdir() if p.name.startswith(LIBRARIES) and ".so" in p.name
                   and not p.is_symlink())
    cublaslt = directory / "libcublasLt.so.13"
    cuobjdump, kir = find_cuobjdump(), [str(args.python), "-m", "kir"]
    size = sum(p.stat().st_size for p in files)
    print(f"{directory}: {len(files)} files, {size / 1e9:.2f} GB ({', '.join(p.name for p in files)}); "
          f"{os.cpu_count()} cores; best of {args.repeat}\n")
    for command in ([*kir, "inspect", "-q", "--require", "sm_90", *map(str, files)], [cuobjdump, "--version"]):
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # page cache, warm
    rows = [
        ("prefix check: `kir inspect -q --require sm_90 FILES` vs `cuobjdump -lelf` per file", 100,
         best([[*kir, "inspect", "-q", "--require", "sm_90", *map(str, files)]], args.repeat),
         best([[cuobjdump, "-lelf", str(p)] for p in files], args.repeat)),
        ("one library: `kir inspect --json libcublasLt.so.13` vs `cuobjdump -lelf -lptx`", 50,
         best([[*kir, "inspect", "--json", str(cublaslt)]], args.repeat),
         best([[cuobjdump, "-lelf", "-lptx", str(cublaslt)]], args.repeat)),
        ("(the same, text) `kir inspect libcublasLt.so.13` vs `cuobjdump -lelf -lptx`", None,
         best([[*kir, "inspect", str(cublaslt)]], args.repeat),
         best([[cuobjdump, "-lelf", "-lptx", str(cublaslt)]], args.repeat)),
    ]
    floor = best([[str(args.python), "-c", "import kir._core"]], args.repeat)
    print("| task | kir | cuobjdump | kir faster | target |")
    print("|---|---|---|---|---|")
    for task, target, ours, theirs in rows:
        ratio = theirs / ours
        verdict = "" if target is None else (f"≥ {target}×: **met**" if ratio >= target else f"≥ {target}×: not met")
        print(f"| {task} | {ours * 1e3:.0f} ms | {theirs * 1e3:.0f} ms | **{ratio:.0f}×** | {verdict} |")
    print(f"\nPython start-up with `import kir._core` alone: {floor * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
