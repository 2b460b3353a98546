"""Replaying many records (`kir replay --all`): one record's replay as a picklable
job whose result is a plain dict — a row of the regression table — so that it runs
the same in this process or on a Dask worker (kir.distribute).

    from kir.replay.batch import ReplayJob, run_records
    job = ReplayJob(repeat=5)
    rows = run_records(job, paths)                        # here, one after another
    rows = run_records(job, paths, cluster=cluster)       # on a kir.distribute.Cluster

A row (`ROW_KEYS`) says which record (`record`: the file name, `path`), what it
launches (`kernel`, `static_hash`, `launch_identity`), how it went (`status`, one of
`STATUSES`), what was loaded (`code`), whether the record's hashes match its contents
(`hashes_match`, with the plan's `notes`), the verification (`verified`, `mismatches`),
the kernel's times (`times_ms`, CUDA events; `median_ms`), the wall time of the whole
replay of the record (`seconds`: loading, mapping, compiling, launching, comparing),
where it ran (`worker`: host:pid, `devices`: the worker's CUDA_VISIBLE_DEVICES),
for `error`, the message, and `device_fault`: the sticky CUDA error (700 for
CUDA_ERROR_ILLEGAL_ADDRESS, kir.errors.STICKY_CUDA_ERRORS) that killed the process's
device context, else None. A fault costs only its own record: in this process,
the records after it are replayed in a fresh process (`spawn`), one more after
each further fault; on a Dask cluster, the worker that hit it is restarted (a
fresh process: kir.distribute.map_items's `restart_if`), which the row's `notes`
say. Statuses:

- `passed`: the output matches the recording (bitwise, or within the tolerance);
- `failed`: it differs (`mismatches` says where);
- `unverified`: it ran, not verified (`verify=False`);
- `planned`: `plan_only`: the plan was made (no GPU): every chunk read and checked,
  the hashes recomputed, the code chosen (and, for IR, compiled);
- `error`: the record could not be read, planned or replayed (a damaged record, no
  GPU, a driver error), or its worker process died.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from kir.errors import DeviceFaultError, KirError
from kir.replay.comparison import Tolerance

__all__ = ["ROW_KEYS", "STATUSES", "ReplayJob", "error_row", "run_records"]

STATUSES = ("passed", "failed", "unverified", "planned", "error")
ROW_KEYS = ("record", "path", "kernel", "static_hash", "launch_identity", "status", "code", "hashes_match",
            "notes", "verified", "mismatches", "times_ms", "median_ms", "seconds", "worker", "devices", "error",
            "device_fault")


def where() -> tuple[str, str | None]:
    """This process as a row names it: host:pid, and its CUDA_VISIBLE_DEVICES."""
    return f"{socket.gethostname()}:{os.getpid()}", os.environ.get("CUDA_VISIBLE_DEVICES")


def empty_row(path) -> dict:
    worker, devices = where()
    row = dict.fromkeys(ROW_KEYS)
    row.update(record=Path(path).name, path=str(path), notes=[], mismatches=[], times_ms=[], worker=worker,
               devices=devices, status="error")
    return row


def error_row(path, message: str) -> dict:
    """The row of a record whose replay gave no row: its worker died, or kir failed."""
    row = empty_row(path)
    row.update(worker=None, devices=None, error=message)
    return row


@dataclasses.dataclass(frozen=True)
class ReplayJob:
    """How each record is replayed (the options of `kir replay`); calling it with a
    record's path replays that record and returns its row. Errors of the record, the
    plan or the driver (KirError) are the row's `error`."""
    code: str = "launched"
    repeat: int = 1
    verify: bool = True
    tolerance: Tolerance | None = None
    plan_only: bool = False
    device_arch: str | None = None  #: with plan_only: the GPU to plan for (None: sm_90, or a HIP record's target)
    device: int = 0              #: the GPU (a worker's own GPU is its device 0)
    backend: str = "auto"        #: "cuda", "hip" or "auto" (kir.replay.backends)

    def __call__(self, path) -> dict:
        from kir.record import Record
        start = time.perf_counter()
        row = empty_row(path)
        try:
            record = Record.load(path)
            row.update(kernel=record.kernel.demangled, static_hash=record.kernel.static_hash,
                       launch_identity=record.launch.identity)
            (self._plan if self.plan_only else self._replay)(record, row)
        except DeviceFaultError as error:
            row.update(status="error", error=str(error), device_fault=error.code)
        except KirError as error:
            row.update(status="error", error=str(error))
        row["seconds"] = time.perf_counter() - start
        return row

    def _plan(self, record, row: dict) -> None:
        from kir.replay.backends import planned_arch
        from kir.replay.planner import plan
        record.check()  # every chunk a replay would read: present, whole, hashed as named
        p = plan(record, code=self.code, device_arch=self.device_arch or planned_arch(record, self.backend))
        if self.code == "ir":
            p.code_bytes()  # an IR that does not compile is an error of the plan
        row.update(status="planned", code=p.code.kind, hashes_match=p.hashes_match, notes=list(p.notes))

    def _replay(self, record, row: dict) -> None:
        from kir.replay.replayer import Replayer
        with Replayer(record, code=self.code, device=self.device, backend=self.backend) as replayer:
            p = replayer.plan
            row.update(code=p.code.kind, hashes_match=p.hashes_match,
                       notes=list(p.notes) + [f"the {self.code} code defines no global {name}: not restored"
                                              for name in replayer.absent_globals])
            result = replayer.run(repeat=self.repeat, verify=self.verify, tolerance=self.tolerance)
        status = {True: "passed", False: "failed", None: "unverified"}[result.verified]
        row.update(status=status, verified=result.verified, times_ms=list(result.times_ms),
                   median_ms=result.median_ms, mismatches=[dataclasses.asdict(m) for m in result.mismatches])


def checked_row(path, value) -> dict:
    """An executor's result as a row: every key of ROW_KEYS (missing ones empty), a
    known status; anything else is an error row saying what came back."""
    from kir.distribute import Failure
    if isinstance(value, Failure):
        return error_row(path, value.message)
    if not isinstance(value, dict) or value.get("status") not in STATUSES:
        shown = value.get("status") if isinstance(value, dict) else type(value).__name__
        return error_row(path, f"the executor returned {shown!r}, not a row with a status of "
                               f"{', '.join(STATUSES)}")
    row = empty_row(path)
    row.update(worker=None, devices=None)
    row.update({k: v for k, v in value.items() if k in ROW_KEYS})
    row.update(record=Path(path).name, path=str(path))
    return row


def run_records(job: Callable, paths: Sequence, cluster=None, on_row: Callable | None = None) -> list[dict]:
    """`job(path)` for every record, its rows in the paths' order: here, one record
    after another, or on `cluster` (a kir.distribute.Cluster). `job` is a ReplayJob
    or any picklable function of a path returning a row (e.g. a functools.partial);
    what it raises is that record's error row (in this process, with the traceback
    on stderr: a bug, not a bad record). `on_row(index, row)` as each row comes."""
    paths = [str(p) for p in paths]
    if cluster is not None:
        from kir.distribute import map_items
        rows: list[dict] = [None] * len(paths)
        restarted: dict[int, str] = {}

        def restart(i: int, address: str | None, problem: str | None) -> None:
            restarted[i] = (f"the device fault killed the CUDA context of Dask worker {address}: " +
                            (f"it could not be restarted ({problem})" if problem else
                             "restarted (a fresh process for the records after it)"))

        def arrived(i: int, value) -> None:
            rows[i] = checked_row(paths[i], value)
            if i in restarted:
                rows[i]["notes"] = [*(rows[i]["notes"] or []), restarted.pop(i)]
            if on_row is not None:
                on_row(i, rows[i])
        map_items(cluster, functools.partial(_faults_as_rows, job), paths, on_result=arrived, on_restart=restart,
                  restart_if=lambda value: isinstance(value, dict) and bool(value.get("device_fault")))
        return rows
    rows = []
    for i, path in enumerate(paths):
        row = _run_one(job, path)
        rows.append(row)
        if on_row is not None:
            on_row(i, row)
        if row["device_fault"] and i + 1 < len(paths):
            # this process's device context is dead: the rest in fresh processes
            _run_in_fresh_processes(job, paths, i + 1, rows, on_row)
            break
    return rows


def _faults_as_rows(job: Callable, path: str):
    """`job(path)`, with a DeviceFaultError it raises (an executor's: ReplayJob makes
    it its row's) as the record's error row with `device_fault`, from this process."""
    try:
        return job(path)
    except DeviceFaultError as error:
        value = error_row(path, str(error))
        value.update(zip(("worker", "devices"), where()), device_fault=error.code)
        return value


def _run_one(job: Callable, path: str) -> dict:
    try:
        value = _faults_as_rows(job, path)
    except Exception as error:  # a bug in the job: say so, keep going with the other records
        print(f"kir: internal error replaying {path}:\n{traceback.format_exc()}", file=sys.stderr, end="")
        value = error_row(path, f"{type(error).__name__}: {error}")
    return checked_row(path, value)


def _run_in_fresh_processes(job: Callable, paths: list[str], start: int, rows: list[dict],
                            on_row: Callable | None) -> None:
    """paths[start:] replayed in child processes started afresh (multiprocessing's
    `spawn`: no CUDA context inherited), each running records until one faults; a
    child that dies makes its record an error row."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    while start < len(paths):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_child, args=(job, paths[start:], send), daemon=True)
        child.start()
        send.close()
        fault = False
        while not fault:
            try:
                row = receive.recv()
            except EOFError:  # the child ended without a row for paths[start]
                child.join()
                row = error_row(paths[start], f"the fresh process replaying it died (exit status {child.exitcode})")
                fault = True  # another one for the records after it
            rows.append(row)
            if on_row is not None:
                on_row(start, row)
            start += 1
            fault = fault or bool(row["device_fault"])
            if start == len(paths):
                break
        receive.close()
        child.join()


def _child(job: Callable, paths: list[str], send) -> None:
    """In a fresh process: each record's row sent as it comes, stopping after a device fault."""
    for path in paths:
        row = _run_one(job, path)
        send.send(row)
        if row["device_fault"]:
            break
    send.close()
