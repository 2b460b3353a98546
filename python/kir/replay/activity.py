"""Kernel-only timing from CUPTI activity records (Variant.timing "activity"), through
NVIDIA's `cupti-python` (module `cupti`, the `timing` extra).

CUPTI writes one CONCURRENT_KERNEL activity record per kernel the GPU ran, with the
kernel's own start and end on the GPU (ns): the launch latency, the host and the
events around the launch stay out. A timed repeat is one launch from the prologue
followed by a synchronize and `activity_flush_all`, so every kernel record CUPTI
delivers then belongs to that repeat; the repeat's time is the sum of (end - start)
of those records that name the replayed kernel (its mangled name, as the record
keeps it; a repeat with none, or an incomplete one, is a ReplayError).

    with KernelActivity(kernel_name) as activity:
        for _ in range(repeat):
            launch(); synchronize()
            ms, records = activity.take()

CUPTI's buffer callbacks are registered once per process (`cupti.activity_register_callbacks`);
the activity kind is enabled only inside the `with` block.
"""
from __future__ import annotations

import threading
import time

from kir.errors import ReplayError, missing_extra

#: the extra that installs cupti-python (pyproject.toml)
EXTRA = "timing"
#: bytes CUPTI asks for per activity buffer
BUFFER_BYTES = 8 << 20
#: flushes 10 ms apart before a launch without its kernel record is an error
DELIVERY_TRIES = 100

_lock = threading.Lock()
_completed: list = []      # (name, start, end) of the kernel records CUPTI delivered, not yet taken
_kernel_kinds: tuple = ()  # int(ActivityKind.CONCURRENT_KERNEL), int(ActivityKind.KERNEL)
_registered = False


def cupti(needed_by: str = "timing 'activity'"):
    """The `cupti.cupti` module, or kir's missing-extra error naming the `timing` extra."""
    try:
        from cupti import cupti as module
    except ImportError as error:
        raise missing_extra("cupti-python", EXTRA, needed_by, error) from None
    return module


def _buffer_requested():
    return BUFFER_BYTES, 0  # (bytes, records: 0 is as many as fit)


def _buffer_completed(activities) -> None:
    # copied out here: a record is a view of CUPTI's buffer, which is reused once this returns
    kernels = [(_name(a), int(a.start), int(a.end)) for a in activities if int(a.kind) in _kernel_kinds]
    with _lock:
        _completed.extend(kernels)


def _register(c) -> None:
    global _registered, _kernel_kinds
    if not _registered:
        _kernel_kinds = (int(c.ActivityKind.CONCURRENT_KERNEL), int(c.ActivityKind.KERNEL))
        c.activity_register_callbacks(_buffer_requested, _buffer_completed)
        _registered = True


class KernelActivity:
    """CUPTI kernel activity records of one kernel (its name as the record names it:
    the mangled name) while the `with` block runs."""

    def __init__(self, kernel_name: str) -> None:
        self.kernel_name = kernel_name
        self.cupti = cupti()
        self.records = 0   #: kernel records of `kernel_name` taken so far
        self._kind = self.cupti.ActivityKind.CONCURRENT_KERNEL

    def __enter__(self) -> KernelActivity:
        c = self.cupti
        try:
            _register(c)
            c.activity_enable(self._kind)
        except Exception as error:  # cuptiError; NotSupportedError without a driver CUPTI can use
            raise ReplayError(f"CUPTI: enabling kernel activity records: {type(error).__name__}: {error}") from None
        self._drain()  # whatever an earlier user left behind is not ours
        return self

    def __exit__(self, *exc) -> None:
        c = self.cupti
        try:
            c.activity_disable(self._kind)
            self._drain()
        except Exception:
            if exc[0] is None:  # else the error that ended the block is the one to see
                raise

    def _drain(self) -> list:
        c = self.cupti
        try:
            c.activity_flush_all(int(c.ActivityFlag.FLUSH_FORCED))
        except Exception as error:  # cuptiError, NotSupportedError
            raise ReplayError(f"CUPTI: activity_flush_all: {type(error).__name__}: {error}") from None
        with _lock:
            taken = list(_completed)
            _completed.clear()
        return taken

    def take(self) -> tuple[float, int]:
        """(milliseconds, records): the summed GPU duration of the kernel records of
        this kernel delivered since the last take. Call after the launch completed."""
        kernels = self._drain()
        mine = [(start, end) for name, start, end in kernels if name == self.kernel_name]
        for _ in range(DELIVERY_TRIES):  # should CUPTI deliver after the flush returned
            if mine:
                break
            time.sleep(0.01)
            kernels += self._drain()
            mine = [(start, end) for name, start, end in kernels if name == self.kernel_name]
        if not mine:
            seen = sorted({name for name, _, _ in kernels})
            raise ReplayError(f"CUPTI delivered no kernel activity record for {self.kernel_name} after its launch"
                              + (f" (records of: {', '.join(seen)})" if seen else ""))
        incomplete = [(start, end) for start, end in mine if not end > start > 0]
        if incomplete:
            raise ReplayError(f"CUPTI delivered an incomplete kernel activity record for {self.kernel_name} "
                              f"(start {incomplete[0][0]}, end {incomplete[0][1]} ns)")
        self.records += len(mine)
        return sum(end - start for start, end in mine) / 1e6, len(mine)


def _name(activity) -> str:
    name = activity.name
    return name.decode() if isinstance(name, bytes) else str(name)


__all__ = ["BUFFER_BYTES", "EXTRA", "KernelActivity", "cupti"]
