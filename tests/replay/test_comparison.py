"""kir.replay.comparison on real buffers: bitwise, within and beyond a ULP
tolerance, for each element type, and NaN, infinities and signed zeros."""
from __future__ import annotations

import numpy as np
import pytest

import kir.record
from kir.errors import OptionError
from kir.replay import Tolerance, compare
from kir.replay.comparison import check, ulp_distance

DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def region(size: int):
    return kir.record.Region(0, 0x1000, size, [], [], kind="device")


def bf16(values) -> bytes:
    """bfloat16 bytes: the upper halves of float32s (truncated)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def stepped(values, dtype, steps: int) -> bytes:
    """`values` each moved `steps` representable values up (np.nextafter)."""
    out = np.asarray(values, dtype)
    for _ in range(steps):
        out = np.nextafter(out, np.asarray(np.inf, dtype))
    return out.tobytes()


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_ulps_bitwise_within_and_beyond(dtype):
    rng = np.random.default_rng(7)
    expected = (rng.standard_normal(257) * 100).astype(DTYPES[dtype])
    data = expected.tobytes()
    r = region(len(data))
    assert check(r, data, data, Tolerance(ulp=0, dtype=dtype)) is None  # bitwise: no difference at all
    two = stepped(expected, DTYPES[dtype], 2)
    assert list(np.unique(ulp_distance(two, data, dtype))) == [2]
    within = check(r, two, data, Tolerance(ulp=2, dtype=dtype))
    assert within.within and within.max_ulp == 2 and within.ulp_limit == 2
    assert within.max_abs > 0 and 0 < within.max_rel < 1e-2
    assert compare(r, two, data, Tolerance(ulp=2, dtype=dtype)) is None
    beyond = compare(r, two, data, Tolerance(ulp=1, dtype=dtype))
    assert beyond is not None and not beyond.within and beyond.max_ulp == 2
    assert compare(r, two, data) is not None  # no tolerance: bitwise


def test_bfloat16_ulps():
    values = [1.0, -2.5, 3.0e10, 1e-20]
    data = bf16(values)
    bits = np.frombuffer(data, "<u2")
    moved = (bits + np.array([1, 3, 0, 2], np.uint16)).astype("<u2").tobytes()  # up 1, 3, 0, 2 ulp in magnitude
    assert list(ulp_distance(moved, data, "bfloat16")) == [1, 3, 0, 2]
    r = region(len(data))
    assert compare(r, moved, data, Tolerance(ulp=3, dtype="bfloat16")) is None
    m = compare(r, moved, data, Tolerance(ulp=2, dtype="bfloat16"))
    assert m.max_ulp == 3 and m.max_abs == pytest.approx(2 ** -6 * 3)  # -2.5: ulp 2^-6 in bfloat16


def test_ulps_across_zero_and_signed_zero():
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    expected = np.array([0.0, tiny, -0.0], np.float32).tobytes()
    actual = np.array([-0.0, -tiny, 0.0], np.float32).tobytes()
    # +0 and -0 are 0 apart; the smallest subnormal and its negative 2 apart (through zero)
    assert list(ulp_distance(actual, expected, "float32")) == [0, 2, 0]
    assert compare(region(12), actual, expected, Tolerance(ulp=2)) is None
    assert compare(region(12), actual, expected, Tolerance(ulp=1)).max_ulp == 2


def test_nan_matches_only_nan():
    """NaN matches NaN whatever its payload and sign; NaN against a number never
    passes, under any tolerance."""
    expected = np.array([1.0, np.nan, 3.0], np.float32)
    other_nan = expected.copy()
    other_nan.view(np.uint32)[1] = 0xFFC00001  # a negative NaN with another payload
    r = region(12)
    found = check(r, other_nan.tobytes(), expected.tobytes(), Tolerance(ulp=0))
    assert found.within and found.max_ulp == 0 and found.max_abs == 0
    number = expected.copy()
    number[1] = 2.0
    for tolerance in (Tolerance(ulp=1 << 40), Tolerance(atol=1e30), Tolerance(rtol=1e30, norm="l2")):
        assert compare(r, number.tobytes(), expected.tobytes(), tolerance) is not None
        assert compare(r, expected.tobytes(), number.tobytes(), tolerance) is not None


def test_infinities_match_only_themselves():
    expected = np.array([np.inf, -np.inf], np.float64)
    flipped = np.array([-np.inf, np.inf], np.float64)
    r = region(16)
    assert compare(r, expected.tobytes(), expected.tobytes(), Tolerance(ulp=0, dtype="float64")) is None
    assert compare(r, flipped.tobytes(), expected.tobytes(), Tolerance(ulp=1 << 62, dtype="float64")) is not None
    big = np.array([np.finfo(np.float64).max, -np.inf])  # the largest finite is 1 ulp below infinity
    assert compare(r, big.tobytes(), expected.tobytes(), Tolerance(ulp=1, dtype="float64")) is None


def test_ulp_and_norm_together():
    """With both, a region passes only when both hold; atol alone keeps the norm."""
    expected = np.array([1.0, 1000.0], np.float32)
    actual = np.frombuffer(stepped(expected, np.float32, 3), np.float32)  # 3 ulp each: 1000's is 1.8e-4
    r = region(8)
    args = (r, actual.tobytes(), expected.tobytes())
    assert compare(*args, Tolerance(ulp=3)) is None
    assert compare(*args, Tolerance(ulp=3, atol=1e-5)) is not None  # the norm fails
    assert compare(*args, Tolerance(ulp=2, atol=1.0)) is not None   # the ulps fail
    assert compare(*args, Tolerance(ulp=3, atol=1e-3)) is None


def test_a_trailing_partial_element_is_compared_bitwise():
    expected = np.array([1.0], np.float32).tobytes() + b"\x01\x02"
    r = region(6)
    assert compare(r, stepped([1.0], np.float32, 1) + b"\x01\x02", expected, Tolerance(ulp=1)) is None
    assert compare(r, expected[:4] + b"\x01\x03", expected, Tolerance(ulp=1 << 20)) is not None


@pytest.mark.parametrize("kwargs,message", [
    ({"ulp": -1}, "ulp -1"), ({"ulp": 1.5}, "ulp 1.5"), ({"dtype": "int8"}, "dtype 'int8'"),
    ({"atol": float("nan")}, "must not be negative"),
])
def test_bad_tolerances(kwargs, message):
    with pytest.raises(OptionError, match=message):
        Tolerance(**kwargs)
