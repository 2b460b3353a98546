"""Executors for `kir replay --all --executor replay_fakes:NAME` in tests without a GPU
(tests/replay/test_replay_all.py). Each one reads the record for real — the plan job of
kir.replay.batch (every chunk checked, the hashes recomputed) — and stands in only
for the GPU launch. What they do is steered by environment variables, which Dask's
local worker processes inherit:

  FAKE_FAIL    a record file name whose "replay" differs from the recording
  FAKE_CRASH   a record file name whose replay kills its process (os._exit)
  FAKE_SCALE   a factor on the made-up kernel time (default 1)
  FAKE_FAULT   a record file name whose replay is a device fault (CUDA_ERROR_ILLEGAL_ADDRESS,
               sticky): in the process it ran in, every later record fails as the driver
               fails them (cuDevicePrimaryCtxRetain: CUDA_ERROR_ILLEGAL_ADDRESS)
  FAKE_PRINTF  text each replay writes to file descriptor 1 through C's printf, as the
               CUDA driver writes a kernel's device printf
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

_context_dead: list[str] = []  # this process's "device context": dead after FAKE_FAULT's record


def timed(path: str, job) -> dict:
    """The plan, then a made-up launch: its time is the launch's thread count / 1e6
    ms times FAKE_SCALE; FAKE_FAIL's record differs in its first region."""
    name = Path(path).name
    if name == os.environ.get("FAKE_CRASH"):
        os._exit(3)
    if os.environ.get("FAKE_PRINTF"):
        import ctypes
        libc = ctypes.CDLL(None)
        libc.printf(os.environ["FAKE_PRINTF"].encode() + b" %s\n", name.encode())
        libc.fflush(None)
    from kir.errors import DeviceFaultError
    if _context_dead:
        raise DeviceFaultError("cuDevicePrimaryCtxRetain: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access "
                               "was encountered)", 700)
    if name == os.environ.get("FAKE_FAULT"):
        _context_dead.append(name)
        raise DeviceFaultError("the kernel: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)",
                               700)
    row = dataclasses.replace(job, plan_only=True)(path)
    if row["status"] == "error":
        return row
    from kir.record import Record
    record = Record.load(path)
    threads = 1
    for n in (*record.launch.grid, *record.launch.block):
        threads *= n
    ms = threads / 1e6 * float(os.environ.get("FAKE_SCALE", "1"))
    failed = name == os.environ.get("FAKE_FAIL")
    region = record.regions[0]
    row.update(status="failed" if failed else "passed", verified=not failed, times_ms=[ms] * job.repeat,
               median_ms=ms,
               mismatches=[{"region": region.label, "address": region.address, "first_offset": 0,
                            "differing_bytes": region.size, "norm": None, "limit": None}] if failed else [])
    return row


def raises(path: str, job) -> dict:
    raise ValueError(f"the executor broke on {Path(path).name}")


def not_a_row(path: str, job):
    return 42


def environment(_item=None) -> tuple[int, str | None]:
    """This worker: its pid and CUDA_VISIBLE_DEVICES."""
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


def crash_on(item):
    """An item function for kir.distribute.map_items: item 'crash' kills its worker,
    'raise' raises, anything else comes back with this worker's pid."""
    if item == "crash":
        os._exit(3)
    if item == "raise":
        raise RuntimeError("asked to raise")
    return item, os.getpid()
