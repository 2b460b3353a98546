"""Running one tuning trial: a `Point` of a record replayed on a GPU.

A trial's result is a plain dict (`RESULT_KEYS`), JSON-ready, so that it travels
the same from a child process, a Dask worker or a test's executor:

    status          "ok" (verified: bitwise, or within the tolerance), "mismatch"
                    (the output differs from the recording beyond it), "error"
                    (compile, load or launch failed)
    differences     the regions that differ within the tolerance: max_abs, max_rel,
                    max_ulp (kir.replay.Mismatch with within true)
    error_kind      None (ok), "mismatch", "compile" (the variant's options or
                    kir.jit), "load" (the code into the device), "launch" (running
                    or timing it, reading its output back), "timeout" (the trial
                    ran longer than TrialProcess's timeout), "crash" (the replay
                    process died): a driver reads this, not the message
    compile_timings kir.jit.compile's seconds per step (specialize, optimize,
                    codegen, assemble); {} for the recorded code
    constant_bytes  constant memory by bank ({"cmem[0]": bytes, ...})
    median_ms, times_ms   CUDA-event times of the timed launches
    registers, spill_stores, spill_loads, shared_bytes, local_bytes, code_size
    compile_seconds, jit_key (the variant's own key), arch, error, mismatches
    replay_seconds  the replay process's wall seconds for the trial (`evaluate`:
                    opening the record, compiling, loading, the warm-up and timed
                    launches, verifying), compile_seconds included; None from an
                    --executor that does not say (kir.tune.study.phases)

`TrialProcess` runs trials in a child process (`CHILD`: kir.tune.trial's main) that
keeps one Replayer per record — memory mapped once, compiled code cached by JIT
key — and is started again after a trial that failed on the device: a kernel that
faults (an illegal address from a launch configuration the kernel does not
guard) leaves its CUDA context unusable, and takes only its own trial down; a
child that dies (a segfault) is reported as that trial's error. Mneme runs its
experiments in separate processes for the same reason.
"""
from __future__ import annotations

import json
import subprocess
import sys

from kir.errors import KirError, OptionError, PlanError, RecordError

__all__ = ["RESULT_KEYS", "TrialProcess", "evaluate", "result_of"]

#: The child's start: not `python -m kir.tune.trial`, which puts the current directory
#: first on the import path (a `kir/` folder there would be imported instead of kir;
#: issue 21), as kir._irworker starts its worker.
CHILD = ("import sys\nif sys.path[:1] == ['']: del sys.path[0]\n"
         "from kir.tune.trial import main\nsys.exit(main(sys.argv[1:]))\n")

RESULT_KEYS = ("status", "median_ms", "times_ms", "verified", "mismatches", "differences", "registers",
               "spill_stores", "spill_loads", "shared_bytes", "local_bytes", "constant_bytes", "code_size", "code_kind",
               "compile_seconds", "compile_timings", "jit_key", "arch", "error", "error_kind", "replay_seconds")
#: error_kind's values (see the module's docstring)
ERROR_KINDS = ("mismatch", "compile", "load", "launch", "timeout", "crash")


def empty_result(**values) -> dict:
    out = dict.fromkeys(RESULT_KEYS)
    out.update(times_ms=[], mismatches=[], differences=[], compile_timings={}, constant_bytes={})
    out.update(values)
    return out


def result_of(run, arch: str) -> dict:
    """A kir.replay RunResult as a trial result."""
    import dataclasses
    status = "ok" if run.verified else "mismatch"
    constant = getattr(run.resources, "constant_bytes", None) or {}
    return empty_result(status=status, error_kind=None if run.verified else "mismatch",
                        compile_timings=dict(run.timings), constant_bytes=dict(constant),
                        median_ms=run.median_ms, times_ms=list(run.times_ms), verified=run.verified,
                        mismatches=[dataclasses.asdict(m) for m in run.mismatches],
                        differences=[dataclasses.asdict(m) for m in run.differences], registers=run.registers,
                        spill_stores=run.spill_stores, spill_loads=run.spill_loads,
                        shared_bytes=run.shared_memory, local_bytes=run.local_memory, code_size=run.code_size,
                        code_kind=run.code_kind, compile_seconds=run.compile_seconds, jit_key=run.jit_key, arch=arch)


class _Replayers:
    """One Replayer per record path, kept open (this process's)."""

    def __init__(self, device: int = 0) -> None:
        self.device, self.open = device, {}

    def get(self, path: str):
        if path not in self.open:
            from kir.record import Record
            from kir.replay import Replayer
            self.open[path] = Replayer(Record.load(path), code="launched", device=self.device)
        return self.open[path]

    def close(self) -> None:
        for replayer in self.open.values():
            replayer.close()
        self.open.clear()


def evaluate(replayers: _Replayers, path: str, point: dict) -> dict:
    """Run `point` (Point.to_json(), or Space.recorded(): the recorded code at the
    recorded launch, the baseline) on `path`'s record; its result (its wall seconds:
    replay_seconds). KirErrors are an "error" result."""
    import time
    start = time.perf_counter()
    result = _evaluate(replayers, path, point)
    result["replay_seconds"] = time.perf_counter() - start
    return result


def _evaluate(replayers: _Replayers, path: str, point: dict) -> dict:
    from kir.replay import Variant
    from kir.tune.space import Point
    replayer = None
    try:
        replayer = replayers.get(path)
        if point.get("recorded"):
            from kir.replay.comparison import Tolerance
            variant = Variant(warmup=point["warmup"], repeat=point["repeat"], timing=point["timing"],
                              tolerance=Tolerance.from_json(point.get("tolerance")), name="recorded")
        else:
            replayer.stage = "compile"  # the point's options are checked here (a bad pipeline: compile)
            p = Point.from_json(point)
            variant = p.variant(bool(replayer.record.kernel.jit_args))
        return result_of(replayer.run(variant), replayer.device_arch)
    except (KirError, OSError) as error:
        deterministic = isinstance(error, (OptionError, PlanError, RecordError, OSError))
        return empty_result(status="error", error=str(error), error_kind=_stage(replayer, error),
                            device_failed=not deterministic)
    except Exception as error:  # a bug in kir: the trial's error, with where it happened
        import traceback
        return empty_result(status="error", error=f"{type(error).__name__}: {error}\n{traceback.format_exc()}",
                            error_kind=_stage(replayer, error), device_failed=True)


def _stage(replayer, error) -> str:
    """The error_kind of a failure: the Replayer's stage (kir.replay.Replayer.stage);
    a record or plan that cannot be replayed at all is a "load"."""
    from kir.errors import LLVMCrashError
    if isinstance(error, (OptionError, LLVMCrashError)) and (replayer is None or replayer.stage == "compile"):
        return "compile"
    return getattr(replayer, "stage", None) or "load"


class TrialProcess:
    """A child process that runs trials (see the module's docstring); `run(path,
    point)` sends one and waits for its result. Close it (or use `with`)."""

    def __init__(self, device: int = 0, timeout: float | None = None) -> None:
        """`timeout`: seconds a trial may take; past it the process is killed and the
        trial is an "error" of kind "timeout"."""
        self.device, self.proc, self.timeout = device, None, timeout

    def _start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(self.device)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def run(self, path: str, point: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(json.dumps({"path": str(path), "point": point}) + "\n")
            self.proc.stdin.flush()
            if self.timeout is not None:
                import select
                ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
                if not ready:
                    self.proc.kill()
                    self.proc.wait()
                    self.proc = None
                    return empty_result(status="error", error_kind="timeout",
                                        error=f"the trial ran longer than {self.timeout:g} s: its process was killed")
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = self.proc.wait()
            self.proc = None
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return empty_result(status="error", error_kind="crash", error=f"the replay process {how} during the trial")
        result = json.loads(line)
        if result.pop("device_failed", False):
            self.close()  # the context may be unusable: a fresh process for the next trial
        return result

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> TrialProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """The child: one JSON request per line on stdin, one result per line on stdout;
    exits after a result whose failure may have left the device unusable."""
    device = int(argv[0]) if argv else 0
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the result channel
    replayers = _Replayers(device)
    try:
        for line in sys.stdin:
            request = json.loads(line)
            result = evaluate(replayers, request["path"], request["point"])
            out.write(json.dumps(result) + "\n")
            out.flush()
            if result.get("device_failed"):
                return 0
    finally:
        replayers.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
