"""Comparing a replay's device memory with the recorded epilogues: bitwise, or
within a tolerance (atol + rtol * norm(expected), in the l1, l2 or linf norm of
float32 or float64 elements)."""
from __future__ import annotations

from dataclasses import dataclass

from kir.errors import OptionError, ReplayError, missing_extra
from kir.record import Region

NORMS = ("l1", "l2", "linf")
DTYPES = ("float32", "float64")


@dataclass
class Tolerance:
    """Outputs compared as `dtype` values: a region passes when norm(actual - expected)
    <= atol + rtol * norm(expected). NaN where the record has none fails."""
    atol: float = 0.0
    rtol: float = 0.0
    norm: str = "linf"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise OptionError(f"norm {self.norm!r}: expected one of {', '.join(NORMS)}")
        if self.dtype not in DTYPES:
            raise OptionError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.atol < 0 or self.rtol < 0:
            raise OptionError("atol and rtol must not be negative")


@dataclass
class Mismatch:
    region: str             #: the region's label ("device allocation at 0x...", "global g")
    address: int            #: the recorded address
    first_offset: int       #: the first byte that differs
    differing_bytes: int
    norm: float | None = None   #: with a tolerance: the norm of the difference
    limit: float | None = None  #: ... and what it had to stay under


def compare(region: Region, actual: bytes, expected: bytes, tolerance: Tolerance | None = None) -> Mismatch | None:
    """None when `actual` passes for `expected`: bitwise, or within the tolerance."""
    if actual == expected:
        return None
    first, count = _bitwise_difference(actual, expected)
    mismatch = Mismatch(region.label, region.address, first, count)
    if tolerance is None:
        return mismatch
    mismatch.norm, mismatch.limit = _norms(actual, expected, tolerance)
    passes = mismatch.norm <= mismatch.limit and _tail(actual, tolerance) == _tail(expected, tolerance)
    return None if passes else mismatch


def _bitwise_difference(a: bytes, b: bytes) -> tuple[int, int]:
    """(first differing offset, number of differing bytes), at C speed."""
    n = min(len(a), len(b))
    xor = (int.from_bytes(a[:n], "little") ^ int.from_bytes(b[:n], "little")).to_bytes(n, "little")
    count = n - xor.count(0) + abs(len(a) - len(b))
    return len(xor) - len(xor.lstrip(b"\0")), count


def _tail(data: bytes, tolerance: Tolerance) -> bytes:
    """Bytes after the last whole element: compared bitwise."""
    item = 4 if tolerance.dtype == "float32" else 8
    return data[len(data) - len(data) % item:]


def _norms(actual: bytes, expected: bytes, tolerance: Tolerance) -> tuple[float, float]:
    try:
        import numpy as np
    except ImportError as error:
        raise missing_extra("numpy", "replay", "comparing with a tolerance", error, ReplayError) from None
    item = np.dtype(tolerance.dtype).itemsize
    n = len(expected) // item * item
    x = np.frombuffer(actual[:n], tolerance.dtype).astype(np.float64)
    y = np.frombuffer(expected[:n], tolerance.dtype).astype(np.float64)
    order = {"l1": 1, "l2": 2, "linf": np.inf}[tolerance.norm]
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(np.isnan(x) & np.isnan(y), 0.0, x - y)
        value = float(np.linalg.norm(diff, order)) if n else 0.0
        limit = tolerance.atol + tolerance.rtol * (float(np.linalg.norm(y, order)) if n else 0.0)
    return (value if value == value else float("inf")), limit


def tolerance_for(region: Region, tolerance) -> Tolerance | None:
    """A Tolerance, or a dict of them by global name or allocation address (key None:
    every other region)."""
    if not isinstance(tolerance, dict):
        return tolerance
    key = region.name if region.is_global else region.address
    return tolerance.get(key, tolerance.get(None))


__all__ = ["compare", "DTYPES", "Mismatch", "NORMS", "Tolerance", "tolerance_for"]
