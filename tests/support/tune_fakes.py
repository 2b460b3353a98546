"""Trial executors for `kir tune --executor tune_fakes:NAME` in tests without a GPU
(tests/tune/test_tune.py). Each reads the record for real and resolves the trial's
variant against it (kir.replay.variant.resolve: every option checked against the
record) and stands in only for the GPU launch, with a time from `model` — which
the tests compute again, independently, to check what the tuner reports.
`compiled` also compiles the variant from the record's IR with kir.jit (real
code, real registers)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path


def model(point: dict, recorded_threads: int) -> tuple[str, float]:
    """(status, ms) of a point (Space.recorded(): the recorded code). Made up, deterministic:
    O2 is best, a register cap of 64 helps, a block of half the recorded threads
    helps, specialized arguments help a little; a block of 32 threads "differs
    from the recording" (a mismatch)."""
    if point.get("recorded"):
        return "ok", 1.0
    threads = math.prod(point["block"])
    if threads == 32:
        return "mismatch", 0.5
    ms = 1.0 + 0.1 * abs(point["opt_level"] - 2) - (0.05 if point["maxrregcount"] == 64 else 0.0)
    ms -= 0.02 if point["specialize_args"] else 0.0
    ms += 0.3 * abs(math.log2(threads / (recorded_threads / 2)))
    return "ok", round(ms, 6)


def _resolve(path: str, point: dict | None):
    from kir.record import Record
    from kir.replay.variant import resolve
    from kir.tune.space import Point
    record = Record.load(path)
    variant = None if point.get("recorded") else Point.from_json(point).variant(bool(record.kernel.jit_args))
    if variant is not None:
        resolve(record, variant)
    return record, variant


def modelled(path: str, point: dict) -> dict:
    """model's result; TUNE_FAKE_CALLS=FILE: a line appended to FILE per call."""
    from kir.tune.trial import empty_result
    if os.environ.get("TUNE_FAKE_CALLS"):
        with open(os.environ["TUNE_FAKE_CALLS"], "a") as calls:
            calls.write("call\n")
    if os.environ.get("TUNE_FAKE_CRASH") and not point.get("recorded") and point["opt_level"] == 1:
        os._exit(3)
    record, _ = _resolve(path, point)
    if os.environ.get("TUNE_FAKE_ERROR") and not point.get("recorded"):
        return empty_result(status="error", error="compile failed (TUNE_FAKE_ERROR)", arch="sm_90")
    status, ms = model(point, math.prod(record.launch.block))
    return empty_result(status=status, median_ms=ms, times_ms=[ms] * 3, verified=status == "ok", arch="sm_90",
                        error="the output differs" if status != "ok" else None)


def launch_fails(path: str, point: dict) -> dict:
    """modelled, but a block of more than 512 threads fails to launch, as the driver
    refuses a block the kernel's registers do not fit (error_kind "launch")."""
    if not point.get("recorded") and math.prod(point["block"]) > 512:
        from kir.tune.trial import empty_result
        _resolve(path, point)
        return empty_result(status="error", error_kind="launch", arch="sm_90",
                            error="cuLaunchKernel(_Z5saxpyfPKfPfi): CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    return modelled(path, point)


def spread(path: str, point: dict) -> dict:
    """modelled, its timed rounds spread around the model's time (half, it, three
    times): --metric min/mean/median/max each rank a different statistic."""
    result = modelled(path, point)
    ms = result["median_ms"]
    if ms is not None:
        result["times_ms"] = [ms / 2, ms, ms * 3]
    return result


def compiled(path: str, point: dict) -> dict:
    """modelled, the code compiled for real (kir.jit), its registers reported."""
    from kir.replay.variant import compile_variant, jit_key
    from kir.tune.trial import empty_result
    record, variant = _resolve(path, point)
    status, ms = model(point, math.prod(record.launch.block))
    result = empty_result(status=status, median_ms=ms, times_ms=[ms] * 3, verified=status == "ok", arch="sm_90")
    if variant is not None:
        # what Replayer.run_variant returns after the launch, the code compiled for real:
        # the trial's result is kir.tune.trial.result_of's (compile timings, constant memory)
        from kir.replay.replayer import RunResult
        from kir.tune.trial import result_of
        code = compile_variant(record, variant, "sm_90")
        run = RunResult(grid=variant.grid, block=variant.block, shared_bytes=0, launch_identity="",
                        variant=False, times_ms=[ms] * 3, verified=status == "ok", mismatches=[],
                        compiled=True, jit_key=jit_key(record, variant, "sm_90"), code_kind=code.kind,
                        code_size=len(code.code), compile_seconds=code.compile_seconds,
                        resources=code.resources, timings=dict(code.timings))
        result = result_of(run, "sm_90")
    return result


def cli(*args, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """The installed `kir` CLI in a fresh process that can import these executors."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent),
                                                                os.environ.get("PYTHONPATH", "")]),
                   **(env or {})}
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True,
                          env=environment, timeout=timeout)


#: contracted: how many ulp each fp_contract moves every output element, and how fast it is
CONTRACTION = {"auto": (0, 1.0), "on": (1, 0.9), "off": (1, 0.95), "fast": (2, 0.7)}


def contracted(path: str, point: dict) -> dict:
    """A stand-in for a kernel whose floating-point results move with contraction (the
    stencil of issue 24 §2): each region's output is its recorded epilogue with every
    float32 element moved CONTRACTION[fp_contract] ulp (its bits + n), verified
    for real (kir.replay.comparison: the point's tolerance, else the record's
    annotations, else bitwise)."""
    import dataclasses

    import numpy as np

    from kir.replay.comparison import Tolerance, check, tolerance_for
    from kir.tune.trial import empty_result
    record, _ = _resolve(path, point)
    moved, ms = (0, 1.0) if point.get("recorded") else CONTRACTION[point["fp_contract"]]
    tolerance = Tolerance.from_json(point.get("tolerance"))
    mismatches, differences = [], []
    for region in record.regions:
        if not region.snapshotted:
            continue
        expected = record.epilogue(region)
        n = len(expected) // 4 * 4
        bits = np.frombuffer(expected[:n], "<u4").copy()
        bits[bits & 0x7FFFFFFF != 0] += moved  # zeros stay (a nonzero moved across zero is not the point)
        found = check(region, bits.tobytes() + expected[n:], expected, tolerance_for(region, tolerance))
        if found is not None:
            (differences if found.within else mismatches).append(dataclasses.asdict(found))
    status = "mismatch" if mismatches else "ok"
    return empty_result(status=status, median_ms=ms, times_ms=[ms] * 3, verified=not mismatches, arch="sm_90",
                        mismatches=mismatches, differences=differences)


#: timed: the compile and replay seconds it reports, and sleeps through
TIMED = {"compile": 0.02, "replay": 0.05}


def timed(path: str, point: dict) -> dict:
    """modelled, taking TIMED["replay"] seconds of which it says TIMED["compile"] were
    compiling (replay_seconds, compile_seconds: what kir.tune.trial.evaluate reports)."""
    import time
    start = time.perf_counter()
    result = modelled(path, point)
    time.sleep(max(0.0, TIMED["replay"] - (time.perf_counter() - start)))
    return result | {"compile_seconds": None if point.get("recorded") else TIMED["compile"],
                     "replay_seconds": TIMED["replay"]}
