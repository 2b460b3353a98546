"""What the benchmarks share: whole-process timing and peak memory, tool lookup."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"

GNU_TIME = "/usr/bin/time"


def run_once(command: list[str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in KiB, stdout) of one whole process.

    The peak RSS comes from GNU time, a small C parent: a child forked from this
    Python process would report this process's own resident set as its peak.
    """
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.NamedTemporaryFile("r") as usage:
        start = time.perf_counter()
        proc = subprocess.run([GNU_TIME, "-f", "%M", "-o", usage.name, *command], stdout=out,
                              stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed with status {proc.returncode}")
        out.seek(0)
        return wall, int(usage.read().split()[-1]), out.read()


def measure(command: list[str], repeat: int) -> tuple[float, int, str]:
    runs = [run_once(command) for _ in range(repeat)]
    return (statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2])




def kir_command(python: Path = Path(sys.executable)) -> list[str]:
    script = python.parent / "kir"
    return [str(script)] if script.exists() else [str(python), "-m", "kir"]


def clean_venv() -> Path:
    """A fresh virtual environment with kir installed from this checkout."""
    venv = CACHE / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(HERE.parent)], check=True)
    return python


def require_gnu_time() -> None:
    if not os.access(GNU_TIME, os.X_OK):
        sys.exit("needs GNU time for peak memory: apt-get install time")


def row(task: str, ours: tuple, theirs: tuple) -> str:
    return (f"| {task} | {ours[0]:.3f} s | {theirs[0]:.3f} s | **{theirs[0] / ours[0]:.1f}×** | "
            f"{ours[1] / 1024:.0f} MiB | {theirs[1] / 1024:.0f} MiB | **{theirs[1] / ours[1]:.1f}×** |")


def pin_to(cpu: int | None):
    """A `preexec_fn` that runs the child on CPU `cpu` alone (None or < 0: anywhere)."""
    if cpu is None or cpu < 0:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})

