"""Replaying a recorded launch (docs/record-format.md): plan it, then run it.

The package is five layers, each importing only those before it:

- `kir.replay.comparison`: device memory against the recorded epilogues (bitwise,
  or within a Tolerance: atol + rtol * norm).
- `kir.replay.planner`: `plan(record)`, no GPU: the memory to reserve and map, the
  globals to restore, the code to load and why, the argument buffer, and the
  hashes recomputed from the record under THE static-hash policy (a mismatch is
  a note in `plan.notes`, never ignored); `--code ir` is the record's IR compiled
  to PTX by kir.jit.compile (libdevice linked when called: kir.jit.libdevice).
- `kir.replay.variant`: `Variant` (launch configuration, specialization, compile
  options, warm-up and repeat), its JIT key and its code (kir.jit.compile of the
  record's IR), no GPU.
- `kir.replay.backends`: the GPU API a Replayer drives, one class per vendor:
  the CUDA driver API (cuda-bindings) or HIP (hip-python).
- `kir.replay.replayer`: `Replayer(record, backend="auto")` carries a plan out
  through a backend and `run()`s it, or `run(variant)`.

Everything is importable from `kir.replay` itself::

    from kir.record import Record
    from kir.replay import Replayer, plan
    record = Record.load("kir-records/records/<static>.<dynamic>.kirrec")
    print(plan(record).describe())
    with Replayer(record, code="cubin") as replayer:
        result = replayer.run(repeat=10)
        print(result.median_ms, result.verified, result.mismatches)
"""
from kir.errors import NoDeviceError, PlanError, ReplayError
from kir.replay.backends import BACKENDS
from kir.replay.comparison import DTYPES, NORMS, Mismatch, Tolerance, compare, tolerance_for
from kir.replay.planner import (
                                CODE_KINDS,
                                RESERVE_ALIGNMENT,
                                CodeChoice,
                                Hashes,
                                Mapping,
                                ReplayPlan,
                                dynamic_hash,
                                launch_identity,
                                pack_args,
                                plan,
                                recompute_hashes,
                                static_hash,
)
from kir.replay.replayer import Replayer, RunResult
from kir.replay.variant import Resolved, Variant, compile_variant, jit_key as variant_jit_key, resolve

__all__ = [
    "BACKENDS", "CODE_KINDS", "DTYPES", "NORMS", "RESERVE_ALIGNMENT", "CodeChoice", "Hashes", "Mapping",
    "Mismatch", "NoDeviceError", "PlanError", "ReplayError", "ReplayPlan", "Replayer", "RunResult",
    "Tolerance", "compare", "dynamic_hash", "launch_identity", "pack_args",
    "plan", "recompute_hashes", "static_hash", "tolerance_for",
    "Resolved", "Variant", "compile_variant", "resolve", "variant_jit_key",
]
