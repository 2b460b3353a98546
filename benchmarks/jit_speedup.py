"""kir's JIT against AOT code (issue 23 §6): Proteus-style kernels (benchmarks/jit_speedup.cu)
built with clang-22 -O3, their unit's device IR embedded the Proteus way
(tests/support/proteus_layout.py: marked !proteus.jit, `_jit_bitcode_tu_*`; the IR as the
pass sees it in an -O3 compile, before LLVM's passes), the runtime constants registered
through the Proteus ABI.

Two steps, because clang is not on the GPU host:

    python benchmarks/jit_speedup.py build DIR     # here: clang-22, ptxas; writes DIR (< 1 MiB)
    python benchmarks/jit_speedup.py run DIR [--launches N] [--kernels a,b] > table.md   # the GPU host

`build` makes DIR/app (clang -O3, the AOT baseline, IR embedded), DIR/app_off (the same with
-ffp-contract=off, for the contraction check), DIR/libcudart.so.13 (the runtime it was linked
with, used when the host's is absent), DIR/build.json (clang's registers per kernel, ptxas -v).
`run` measures, per kernel, on the GPU (CUDA events inside the app, µs per launch, the median
of --repeats runs):
  AOT       the app as built (clang -O3), no kir;
  JIT       under `kir run --jit-cache C` with C holding kir.jit's specialized code (the
            launch's runtime constants folded), compiled by `kir jit compile`;
  unspec.   the same key holding kir.jit's unspecialized -O3 code: the JIT's gain that is
            specialization alone is JIT/unspec., kir.jit's code quality is AOT/unspec.;
  compile   kir.jit.compile's time for the specialized kernel (ms; the steps) and the
            `kir jit compile` process wall time (a fresh process and LLVM worker); and
            kir.jit.compile's wall time in this script's warm worker (a compile service);
  e2e       the app's wall time for --e2e-launches launches: alone (AOT), and from an empty
            cache through `kir run --jit-cache EMPTY` (compile on a miss, issue 23 §3: the
            compile service's start, the compile, the run) in sync and async
            (PROTEUS_ASYNC_COMPILATION=1)
            mode; skipped, saying so, when `kir run` does not fill the cache on a miss;
  output    the JIT's checksum against AOT's: "bitwise", or, when it differs, whether the
            JIT compiled with fp_contract off equals the -ffp-contract=off AOT build;
  registers clang's, kir's specialized, kir's unspecialized.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "jit_speedup.cu"
SUPPORT = HERE.parent / "tests" / "support"

# name in the app -> (mangled kernel, its runtime constants as `kir jit compile --arg` takes them:
# POS (1-based):TYPE:VALUE, the values the app launches with)
KERNELS = {
    "stencil": ("_Z9stencil3dPKdPdiiiidd", ["3:i32:128", "4:i32:128", "5:i32:128", "6:i32:2", "7:f64:0.4",
                                            "8:f64:0.1"]),
    "gemm": ("_Z5bgemmPKdS0_Pdiiii", ["4:i32:16", "5:i32:16", "6:i32:16"]),
    "flag": ("_Z7flaggedPKdPdiid", ["4:i32:2", "5:f64:0.75"]),
    "daxpy": ("_Z5daxpydPKdPdi", ["1:f64:0.001"]),
    "hydro": ("_Z7hydro1dPdPKdS1_dddi", ["4:f64:0.25", "5:f64:0.5", "6:f64:0.75"]),
    "ltimes": ("_Z6ltimesPdPKdS1_iiii", ["4:i32:64", "5:i32:32", "6:i32:25"]),
    "trap": ("_Z7trapintPddddddi", ["2:f64:0.0", "3:f64:0.5", "4:f64:0.3", "5:f64:-0.2"]),
}


def sh(args, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


# --- build (here) ---------------------------------------------------------------------------


def build(out: Path) -> None:
    sys.path.insert(0, str(SUPPORT))
    import build as fixture_build  # tests/support/build.py: clang-22's CUDA command lines
    out.mkdir(parents=True, exist_ok=True)
    cuda = fixture_build.CLANG_CUDA
    with tempfile.TemporaryDirectory() as work:
        w = Path(work)
        # The device IR as the Proteus pass sees it in an -O3 compile (its pass runs at the
        # pipeline's early simplification, src/pass/ProteusPass.cpp getProteusPassPluginInfo):
        # the front end's -O3 IR, no optnone, LLVM's passes not yet run.
        sh([*cuda, "-O3", "-Xclang", "-disable-llvm-passes", "--cuda-device-only", "-emit-llvm", "-c", SOURCE,
            "-o", w / "dev0.bc"])
        sh([sys.executable, SUPPORT / "proteus_layout.py", "mark-jit", w / "dev0.bc", w / "dev.bc", "--all"])
        sh([sys.executable, SUPPORT / "proteus_layout.py", "cuda-source", w / "dev.bc", w / "jit_ir.cu", "--no-main"])
        text = (w / "jit_ir.cu").read_text().replace("__device__ const ", "__device__ ")
        (w / "jit_ir.cuh").write_text(text)
        cudart = Path("/usr/local/cuda/lib64/libcudart.so.13")
        link = ["-L/usr/local/cuda/lib64", "-lcudart", "-Wl,-rpath,/usr/local/cuda/lib64", "-Wl,-rpath,$ORIGIN"]
        for name, extra in (("app", []), ("app_off", ["-ffp-contract=off"])):
            sh(["clang++-22", *cuda[1:], "-O3", *extra, "-include", w / "jit_ir.cuh", SOURCE, *link, "-o", out / name])
        shutil.copy2(cudart, out / cudart.name)
        sh([*cuda, "-O3", "--cuda-device-only", "-S", SOURCE, "-o", w / "clang.ptx"])
        log = sh(["ptxas", "-arch=sm_90", "-v", w / "clang.ptx", "-o", w / "clang.cubin"]).stderr
        registers = dict(re.findall(r"entry function '(\w+)' for[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*Used (\d+) registers", log))
        shutil.copy2(w / "clang.ptx", out / "clang.ptx")
    clang_version = sh(["clang++-22", "--version"]).stdout.splitlines()[0]
    (out / "build.json").write_text(json.dumps({"clang": clang_version, "registers": registers}, indent=1))
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"built {out} ({size / 2**20:.1f} MiB): carry it to the GPU host and run "
          f"`python benchmarks/jit_speedup.py run {out}`")


# --- run (on the GPU host) ------------------------------------------------------------------


def app_run(command: list, env: dict | None = None, timeout: int = 600) -> tuple[float, str, float, str]:
    """(µs per launch, checksum, wall seconds, stderr) of one run of the app."""
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} failed ({proc.returncode}): {proc.stderr[-800:]}")
    us = float(re.search(r"us_per_launch ([0-9.]+)", proc.stdout)[1])
    return us, re.search(r"checksum (\w+)", proc.stdout)[1], wall, proc.stderr


def median_run(command, repeats, env=None) -> tuple[float, str]:
    results = [app_run(command, env) for _ in range(repeats)]
    sums = {r[1] for r in results}
    if len(sums) != 1:
        raise RuntimeError(f"{command}: the output changed between runs: {sums}")
    if "run" in command and "--jit-cache" in command:  # every launch must have run the cached code
        said = re.search(r"kir: jit: (\d+) launches looked up in .*: (\d+) hits, (\d+) misses, (\d+) substituted",
                         results[0][3])
        if not said or said[1] != said[2] or said[2] != said[4]:
            raise RuntimeError(f"{' '.join(map(str, command))}: not every launch ran the cached code: "
                               f"{said[0] if said else results[0][3][-400:]}")
    return statistics.median(r[0] for r in results), results[0][1]


def kir(*args) -> list[str]:
    return [sys.executable, "-m", "kir", *map(str, args)]


def jit_compile(app: Path, kernel: str, args: list[str], cache: Path, extra=()) -> tuple[dict, float]:
    start = time.perf_counter()
    proc = sh(kir("jit", "compile", app, "--kernel", kernel, *[f"--arg={a}" for a in args], "--cache", cache,
                  "--json", *extra))
    return json.loads(proc.stdout), time.perf_counter() - start


def unspecialized_under(app: Path, kernel: str, args: list[str], cache: Path) -> dict:
    """kir.jit's unspecialized code stored under the key of the specialized one."""
    import kir.jit
    from kir.cache import Cache
    from kir.commands.jit import find_kernel
    from kir.jit.values import ArgValue
    found = find_kernel(str(app), kernel, "sm_90")
    spec = kir.jit.compile(found.module, kernel, "sm_90", {"args": [ArgValue.parse(a) for a in args]},
                           static_hash=found.static_hash)
    plain = kir.jit.compile(found.module, kernel, "sm_90", None, static_hash=found.static_hash)
    Cache(str(cache)).store(kir.jit.jit_key(spec), plain.code, plain.kind, plain.arch, plain.meta)
    # The specialized compile again in this process's warm LLVM worker (a compile service's
    # case): kir.jit.compile's wall time, round trip included.
    start = time.perf_counter()
    again = kir.jit.compile(found.module, kernel, "sm_90", {"args": [ArgValue.parse(a) for a in args]},
                            static_hash=found.static_hash)
    summary = plain.summary()
    summary["warm"] = f"{(time.perf_counter() - start) * 1000:.0f} ({again.resources.tool})"
    return summary


def e2e(app: Path, name: str, mode: str, launches: int) -> str:
    """The app's wall time (ms) for `launches` launches: `aot` the app alone; `sync` / `async`
    under `kir run` from an empty cache (compile on a miss, issue 23 §3: the compile service's
    start, the compile and the run)."""
    if mode == "aot":
        return f"{app_run([app, name, launches])[2] * 1000:.0f}"
    with tempfile.TemporaryDirectory() as empty:
        env = {"PROTEUS_ASYNC_COMPILATION": "1" if mode == "async" else "0"}
        try:
            us, checksum, wall, _ = app_run(kir("run", "--jit-cache", empty, "--", app, name, launches), env)
        except RuntimeError as error:
            return f"failed: {str(error)[:120]}"
        if not any(Path(empty).rglob("*")):
            return "skipped: `kir run` does not compile on a miss yet (issue 23 §3)"
        return f"{wall * 1000:.0f}"


def run(directory: Path, launches: int, repeats: int, names: list[str], e2e_launches: int) -> None:
    app, app_off = directory / "app", directory / "app_off"
    clang = json.loads((directory / "build.json").read_text())
    rows = []
    work = Path(tempfile.mkdtemp(prefix="kir-speedup-"))
    for name in names:
        kernel, args = KERNELS[name]
        aot_us, aot_sum = median_run([app, name, launches], repeats)
        cache, plain_cache = work / name / "jit", work / name / "plain"
        compiled, compile_wall = jit_compile(app, kernel, args, cache)
        jit_us, jit_sum = median_run(kir("run", "--jit-cache", cache, "--", app, name, launches), repeats)
        plain = unspecialized_under(app, kernel, args, plain_cache)
        plain_us, _ = median_run(kir("run", "--jit-cache", plain_cache, "--", app, name, launches), repeats)
        if jit_sum == aot_sum:
            output = "bitwise"
        else:
            off_cache = work / name / "off"
            jit_compile(app, kernel, args, off_cache, ["--fp-contract", "off"])
            _, off_sum = median_run(kir("run", "--jit-cache", off_cache, "--fp-contract", "off", "--", app_off, name,
                                        launches), 1)
            _, aot_off_sum = median_run([app_off, name, launches], 1)
            output = ("contraction only (bitwise with fp-contract off = AOT -ffp-contract=off)"
                      if off_sum == aot_off_sum else "DIFFERS (also with fp-contract off)")
        steps = " ".join(f"{k} {v * 1000:.0f}" for k, v in compiled["timings"].items())
        rows.append([name, f"{aot_us:.2f}", f"{jit_us:.2f}", f"{aot_us / jit_us:.2f}x", f"{plain_us:.2f}",
                     f"{plain_us / jit_us:.2f}x", f"{aot_us / plain_us:.3f}x",
                     f"{compiled['compile_seconds'] * 1000:.0f} ({steps}; {compiled['resources']['tool']}); "
                     f"process {compile_wall * 1000:.0f}", plain["warm"],
                     " / ".join(e2e(app, name, mode, e2e_launches) for mode in ("aot", "sync", "async")),
                     output,
                     f"{clang['registers'].get(kernel, '?')} / {compiled['resources']['registers']} / "
                     f"{plain['resources']['registers']}"])
        print(f"{name}: done", file=sys.stderr)
    head = ["kernel", "AOT µs", "JIT µs", "JIT speedup", "unspec. µs", "specialization alone",
            "unspec. vs clang -O3", "compile ms (steps; assembler); kir jit compile process ms",
            "compile ms, warm worker",
            f"e2e ms, {e2e_launches} launches: AOT / sync / async", "output", "registers clang / JIT / unspec."]
    print(f"launches per run {launches}, median of {repeats} runs; {clang['clang']}; GPU times from CUDA events\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build", help="build the apps here (clang-22)")
    b.add_argument("directory", type=Path)
    r = sub.add_parser("run", help="measure on the GPU host")
    r.add_argument("directory", type=Path)
    r.add_argument("--launches", type=int, default=200)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--kernels", default=",".join(KERNELS))
    r.add_argument("--e2e-launches", type=int, default=20000,
                   help="launches of the end-to-end runs (the app alone, kir run from an empty cache)")
    args = parser.parse_args()
    if args.step == "build":
        build(args.directory)
    else:
        run(args.directory.resolve(), args.launches, args.repeats, args.kernels.split(","), args.e2e_launches)


if __name__ == "__main__":
    main()
