"""Comparing a replay's device memory with the recorded epilogues: bitwise, or
within a tolerance: atol + rtol * norm(expected), in the l1, l2 or linf norm, and/or
at most `ulp` units in the last place per element, of float16, bfloat16, float32 or
float64 elements.

NaN: an element that is NaN in both the replay and the record matches (whatever
its sign and payload: a NaN a kernel computes differently is still the NaN it
means); NaN against a number, or a number against NaN, never does. Infinities
match only the same infinity; -0.0 and +0.0 are 0 ulp apart. Bytes after the last
whole element are compared bitwise."""
from __future__ import annotations

from dataclasses import dataclass

from kir.errors import OptionError, ReplayError, missing_extra
from kir.record import Region

NORMS = ("l1", "l2", "linf")
DTYPES = ("float16", "bfloat16", "float32", "float64")
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@dataclass
class Tolerance:
    """Outputs compared as `dtype` values. A region passes when norm(actual - expected)
    <= atol + rtol * norm(expected) (checked when atol or rtol is set, or ulp is not),
    and, with `ulp`, when no element is more than `ulp` units in the last place from
    the recorded one. NaN matches NaN only (see the module's docstring)."""
    atol: float = 0.0
    rtol: float = 0.0
    norm: str = "linf"
    dtype: str = "float32"
    ulp: int | None = None

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise OptionError(f"norm {self.norm!r}: expected one of {', '.join(NORMS)}")
        if self.dtype not in DTYPES:
            raise OptionError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if not (self.atol >= 0 and self.rtol >= 0):  # NaN fails too
            raise OptionError("atol and rtol must not be negative")
        if self.ulp is not None and (isinstance(self.ulp, bool) or not isinstance(self.ulp, int) or self.ulp < 0):
            raise OptionError(f"ulp {self.ulp!r}: expected a non-negative integer")

    @property
    def uses_norm(self) -> bool:
        return self.ulp is None or self.atol > 0 or self.rtol > 0

    def describe(self) -> str:
        parts = []
        if self.uses_norm:
            parts.append(f"{self.norm} atol {self.atol:g} rtol {self.rtol:g}")
        if self.ulp is not None:
            parts.append(f"{self.ulp} ulp")
        return f"{self.dtype} " + ", ".join(parts)

    def to_json(self) -> dict:
        return {"atol": self.atol, "rtol": self.rtol, "norm": self.norm, "dtype": self.dtype, "ulp": self.ulp}

    @classmethod
    def from_json(cls, data: dict | None) -> "Tolerance | None":
        return None if data is None else cls(**data)

    @classmethod
    def of(cls, atol: float | None = None, rtol: float | None = None, ulp: int | None = None,
           norm: str = "linf", dtype: str = "float32") -> "Tolerance | None":
        """The command line's tolerance (`--atol`, `--rtol`, `--ulp`, `--norm`, `--dtype`):
        None when none of the three bounds is given (bitwise, or the record's annotations)."""
        if atol is None and rtol is None and ulp is None:
            return None
        return cls(atol=atol or 0.0, rtol=rtol or 0.0, norm=norm, dtype=dtype, ulp=ulp)


@dataclass
class Mismatch:
    """A region whose bytes differ from the recording's: outside the tolerance (a
    mismatch), or, with `within` True, inside it (verified, and by how much)."""
    region: str             #: the region's label ("device allocation at 0x...", "global g")
    address: int            #: the recorded address
    first_offset: int       #: the first byte that differs
    differing_bytes: int
    norm: float | None = None   #: with a tolerance: the norm of the difference
    limit: float | None = None  #: ... and what it had to stay under
    max_abs: float | None = None  #: with a tolerance: the largest `|actual - expected|` of an element
    max_rel: float | None = None  #: ... the largest `|actual - expected| / |expected|` (expected != 0)
    max_ulp: int | None = None    #: ... the largest distance in units in the last place
    ulp_limit: int | None = None  #: ... what max_ulp had to stay under (Tolerance.ulp)
    within: bool = False          #: the difference is within the tolerance: verified


def check(region: Region, actual: bytes, expected: bytes, tolerance: Tolerance | None = None) -> Mismatch | None:
    """None when `actual` is bitwise `expected`; else how it differs, `within` the
    tolerance or not."""
    if actual == expected:
        return None
    first, count = _bitwise_difference(actual, expected)
    mismatch = Mismatch(region.label, region.address, first, count)
    if tolerance is None or len(actual) != len(expected):
        return mismatch
    stats = _measure(actual, expected, tolerance)
    mismatch.norm, mismatch.limit, mismatch.max_abs, mismatch.max_rel, mismatch.max_ulp, nan_ok = stats
    passes = nan_ok and _tail(actual, tolerance) == _tail(expected, tolerance)
    if tolerance.uses_norm:
        passes = passes and mismatch.norm <= mismatch.limit
    if tolerance.ulp is not None:
        mismatch.ulp_limit = tolerance.ulp
        passes = passes and mismatch.max_ulp <= tolerance.ulp
    mismatch.within = passes
    return mismatch


def compare(region: Region, actual: bytes, expected: bytes, tolerance: Tolerance | None = None) -> Mismatch | None:
    """None when `actual` passes for `expected`: bitwise, or within the tolerance."""
    found = check(region, actual, expected, tolerance)
    return None if found is None or found.within else found


def _bitwise_difference(a: bytes, b: bytes) -> tuple[int, int]:
    """(first differing offset, number of differing bytes), at C speed."""
    n = min(len(a), len(b))
    xor = (int.from_bytes(a[:n], "little") ^ int.from_bytes(b[:n], "little")).to_bytes(n, "little")
    count = n - xor.count(0) + abs(len(a) - len(b))
    return len(xor) - len(xor.lstrip(b"\0")), count


def _tail(data: bytes, tolerance: Tolerance) -> bytes:
    """Bytes after the last whole element: compared bitwise."""
    item = ITEMSIZE[tolerance.dtype]
    return data[len(data) - len(data) % item:]


def _numpy():
    try:
        import numpy as np
    except ImportError as error:
        raise missing_extra("numpy", "replay", "comparing with a tolerance", error, ReplayError) from None
    return np


def _bits(data: bytes, dtype: str):
    """The elements' bit patterns, unsigned, and their values as float64."""
    np = _numpy()
    item = ITEMSIZE[dtype]
    n = len(data) // item * item
    bits = np.frombuffer(data[:n], f"<u{item}")
    if dtype == "bfloat16":  # the upper half of a float32 (numpy has no bfloat16)
        values = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        values = bits.view(f"<f{item}").astype(np.float64)
    return bits, values


def ulp_distance(actual: bytes, expected: bytes, dtype: str):
    """Per element: how many representable `dtype` values lie between the two (0 for
    -0.0 and +0.0), as uint64 (NaNs: meaningless, filtered by the caller)."""
    np = _numpy()
    item = ITEMSIZE[dtype]
    sign = np.uint64(1 << (8 * item - 1))

    def ordered(bits):  # sign-magnitude onto a line: -x at sign - |x|, +x at sign + |x|
        b = bits.astype(np.uint64)
        negative = (b & sign) != 0
        magnitude = b & (sign - np.uint64(1))
        return np.where(negative, sign - magnitude, sign + magnitude)

    a, _ = _bits(actual, dtype)
    e, _ = _bits(expected, dtype)
    oa, oe = ordered(a), ordered(e)
    return np.where(oa >= oe, oa - oe, oe - oa)


def _measure(actual: bytes, expected: bytes, tolerance: Tolerance):
    """(norm of the difference, its limit, max abs, max rel, max ulp, NaNs agree)."""
    np = _numpy()
    _, x = _bits(actual, tolerance.dtype)
    _, y = _bits(expected, tolerance.dtype)
    n = len(y)
    order = {"l1": 1, "l2": 2, "linf": np.inf}[tolerance.norm]
    both_nan = np.isnan(x) & np.isnan(y)
    nan_ok = bool(np.array_equal(np.isnan(x), np.isnan(y)))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = both_nan | (x == y)  # equal infinities too
        diff = np.where(same, 0.0, x - y)
        value = float(np.linalg.norm(diff, order)) if n else 0.0
        limit = tolerance.atol + tolerance.rtol * (float(np.linalg.norm(np.where(both_nan, 0.0, y), order))
                                                   if n else 0.0)
        absolute = np.abs(diff)
        max_abs = float(np.max(absolute)) if n else 0.0
        nonzero = (y != 0) & ~both_nan
        max_rel = float(np.max(absolute[nonzero] / np.abs(y[nonzero]))) if nonzero.any() else 0.0
    ulps = ulp_distance(actual, expected, tolerance.dtype)
    ulps = ulps[~(np.isnan(x) | np.isnan(y))]
    max_ulp = int(ulps.max()) if len(ulps) else 0
    if not nan_ok:
        max_ulp = max(max_ulp, 1 << 62)  # NaN against a number: no number of ulps covers it
    clean = [v if v == v else float("inf") for v in (value, max_abs, max_rel)]
    return clean[0], limit, clean[1], clean[2], max_ulp, nan_ok


def _norms(actual: bytes, expected: bytes, tolerance: Tolerance) -> tuple[float, float]:
    """(norm of the difference, its limit)."""
    value, limit, *_ = _measure(actual, expected, tolerance)
    return value, limit


def tolerance_for(region: Region, tolerance) -> Tolerance | None:
    """A Tolerance, or a dict of them by global name or allocation address (key None:
    every other region). Where that gives none (None, or a dict without the region
    or None): the app's annotation of the region (`annotated`), else None: bitwise."""
    if isinstance(tolerance, dict):
        key = region.name if region.is_global else region.address
        tolerance = tolerance.get(key, tolerance.get(None))
    return tolerance if tolerance is not None else annotated(region)


def annotated(region: Region) -> Tolerance | None:
    """The Tolerance of the app's annotation of `region` (kir_record_annotate, kir/record.h;
    the record's `tolerance`), or None."""
    a = getattr(region, "tolerance", None)
    if not a:
        return None
    threshold = float(a["threshold"])
    if a["kind"] == "ulp":
        return Tolerance(dtype=a["dtype"], ulp=int(threshold))
    return Tolerance(dtype=a["dtype"], norm=a["norm"], **{"atol" if a["kind"] == "abs" else "rtol": threshold})


__all__ = ["annotated", "check", "compare", "DTYPES", "ITEMSIZE", "Mismatch", "NORMS", "Tolerance", "tolerance_for",
           "ulp_distance"]
