"""Executors for `kir replay --all --executor replay_fakes:NAME` in tests without a GPU
(tests/replay/test_replay_all.py). Each one reads the record for real — the plan job of
kir.replay.batch (every chunk checked, the hashes recomputed) — and stands in only
for the GPU launch. What they do is steered by environment variables, which Dask's
local worker processes inherit:

  FAKE_FAIL    a record file name whose "replay" differs from the recording
  FAKE_CRASH   a record file name whose replay kills its process (os._exit)
  FAKE_SCALE   a factor on the made-up kernel time (default 1)
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path


def timed(path: str, job) -> dict:
    """The plan, then a made-up launch: its time is the launch's thread count / 1e6
    ms times FAKE_SCALE; FAKE_FAIL's record differs in its first region."""
    name = Path(path).name
    if name == os.environ.get("FAKE_CRASH"):
        os._exit(3)
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
