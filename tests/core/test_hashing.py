"""The canonical hashes: the C++ core (through the bindings) against committed
golden vectors and against an independent Python implementation of the
encoding (tests/support/hash_reference.py, with the PyPI xxhash package as XXH3)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings, strategies as st

import hash_reference as ref
from kir import _core
from kir.model import ArgType

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "hash_vectors.json").read_text())
TYPES = {name: getattr(ArgType, name) for name in ref.ARG_TYPES}


def core_dynamic(static_hex, arch, args=(), grid=None, block=None, bounds=None, config=()):
    """Format 1's dynamic hash (records written before format 2 carry it; newer ones too,
    for older readers): test_jit_key.py covers the JIT key and the launch identity."""
    h = _core.DynamicHash(_core.HashDomain.dynamic_v1, _core.Hash128.from_hex(static_hex), arch)
    for position, kind, value in args:
        h.arg(position, TYPES[kind], value)
    if grid is not None:
        h.grid(*grid)
    if block is not None:
        h.block(*block)
    if bounds is not None:
        h.bounds(*bounds)
    for key, value in config:
        h.config(key, value)
    return h.finish().hex


@pytest.mark.parametrize("vector", VECTORS["static"], ids=lambda v: f"{v['code_kind']}-{v['name'][:12]}")
def test_static_golden_vectors(vector):
    modules = [bytes.fromhex(m) for m in vector["modules"]]
    assert _core.static_hash(vector["name"], vector["code_kind"], modules).hex == vector["hash"]
    assert ref.static_hash(vector["name"], vector["code_kind"], modules) == vector["hash"]


@pytest.mark.parametrize("vector", VECTORS["dynamic"], ids=lambda v: v["arch"])
def test_dynamic_golden_vectors(vector):
    fields = dict(args=[(p, t, bytes.fromhex(v)) for p, t, v in vector["args"]],
                  grid=vector["grid"], block=vector["block"], bounds=vector["bounds"],
                  config=[(k, bytes.fromhex(v)) for k, v in vector["config"]])
    assert core_dynamic(vector["static"], vector["arch"], **fields) == vector["hash"]
    assert ref.dynamic_hash(vector["static"], vector["arch"], **fields) == vector["hash"]


@pytest.mark.parametrize("vector", VECTORS["proteus"], ids=lambda v: v["name"])
def test_proteus_golden_vectors(vector):
    modules = [bytes.fromhex(m) for m in vector["modules"]]
    assert _core.proteus_static_hash(vector["name"], modules, True) == vector["llvm20"]
    assert _core.proteus_static_hash(vector["name"], modules, False) == vector["fnv"]


def test_static_hash_of_digests_equals_static_hash():
    modules = [b"one", b"two"]
    assert _core.static_hash_of_digests("k", "ir", [_core.xxh3_128(m) for m in modules]) == \
        _core.static_hash("k", "ir", modules)


def test_module_order_does_not_matter():
    a = _core.static_hash("k", "ir", [b"one", b"two", b"three"])
    assert a == _core.static_hash("k", "ir", [b"three", b"one", b"two"])
    assert a != _core.static_hash("k", "ir", [b"one", b"two"])


def test_every_field_changes_the_dynamic_hash():
    s = _core.static_hash("k", "ir", [b"m"]).hex
    base = dict(args=[(1, "i32", struct.pack("<i", 1))], grid=[1, 1, 1], block=[32, 1, 1],
                bounds=[256, 1], config=[("opt", b"3")])
    reference = core_dynamic(s, "sm_90", **base)
    variants = [
        core_dynamic(s, "sm_80", **base),
        core_dynamic(s, "sm_90", **{**base, "args": [(2, "i32", struct.pack("<i", 1))]}),
        core_dynamic(s, "sm_90", **{**base, "args": [(1, "u32", struct.pack("<I", 1))]}),
        core_dynamic(s, "sm_90", **{**base, "args": [(1, "i32", struct.pack("<i", 2))]}),
        core_dynamic(s, "sm_90", **{**base, "grid": [2, 1, 1]}),
        core_dynamic(s, "sm_90", **{**base, "block": [64, 1, 1]}),
        core_dynamic(s, "sm_90", **{**base, "bounds": [128, 1]}),
        core_dynamic(s, "sm_90", **{**base, "config": [("opt", b"2")]}),
        core_dynamic(s, "sm_90", **{**base, "grid": None}),
        core_dynamic(_core.static_hash("k2", "ir", [b"m"]).hex, "sm_90", **base),
    ]
    assert len({reference, *variants}) == len(variants) + 1


def test_hex_form_is_strict():
    h = _core.static_hash("k", "ir", [b"m"])
    assert len(h.hex) == 32 and h.hex == h.hex.lower() and str(h) == h.hex
    assert _core.Hash128.from_hex(h.hex) == h
    for bad in (h.hex.upper(), h.hex[:-1], h.hex + "0", "g" * 32, " " + h.hex[1:], ""):
        with pytest.raises(ValueError):
            _core.Hash128.from_hex(bad)


def test_xxh3_128_matches_the_xxhash_package():
    for data in (b"", b"a", bytes(range(256)) * 100):
        assert _core.xxh3_128(data).hex == xxhash.xxh3_128_hexdigest(data)


def test_fnv1a_known_values():
    # FNV-1a 64 of "" and "a", from the algorithm's published test values.
    assert _core.fnv1a_64(b"") == 0xCBF29CE484222325
    assert _core.fnv1a_64(b"a") == 0xAF63DC4C8601EC8C


# --- properties -------------------------------------------------------------------

names = st.text(max_size=40)
blobs = st.binary(max_size=300)
arg = st.tuples(st.integers(1, 64), st.sampled_from(sorted(ref.ARG_TYPES)), st.binary(max_size=40))
dims = st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                             st.integers(0, 2**32 - 1)).map(list)
dynamic_inputs = st.fixed_dictionaries({
    "arch": st.sampled_from(["sm_90", "sm_80", "gfx90a", "gfx90a:xnack+", ""]),
    "args": st.lists(arg, max_size=6),
    "grid": dims, "block": dims,
    "bounds": st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)).map(list),
    # values past the builder's 512-byte inline buffer too (DynamicHash::config's out-of-line path)
    "config": st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=20) | st.binary(min_size=500, max_size=700)),
                       max_size=4),
})
STATIC = "00112233445566778899aabbccddeeff"


@settings(max_examples=300, deadline=None)
@given(names, st.sampled_from(["ir", "cubin", "ptx", "code-object"]), st.lists(blobs, max_size=4))
def test_core_matches_reference_static(name, kind, modules):
    assert _core.static_hash(name, kind, modules).hex == ref.static_hash(name, kind, modules)


@settings(max_examples=300, deadline=None)
@given(dynamic_inputs)
def test_core_matches_reference_dynamic(fields):
    arch = fields.pop("arch")
    assert core_dynamic(STATIC, arch, **fields) == ref.dynamic_hash(STATIC, arch, **fields)


@settings(max_examples=500, deadline=None)
@given(dynamic_inputs, dynamic_inputs)
def test_distinct_dynamic_inputs_never_encode_alike(a, b):
    a, b = dict(a), dict(b)
    ea = ref.dynamic_encoding(STATIC, a.pop("arch"), **a)
    eb = ref.dynamic_encoding(STATIC, b.pop("arch"), **b)
    if ea == eb:
        assert a == b


@settings(max_examples=500, deadline=None)
@given(names, st.lists(blobs, max_size=3), names, st.lists(blobs, max_size=3))
def test_distinct_static_inputs_never_encode_alike(n1, m1, n2, m2):
    e1, e2 = ref.static_encoding(n1, "ir", m1), ref.static_encoding(n2, "ir", m2)
    if e1 == e2:
        assert n1 == n2 and sorted(map(ref.digest, m1)) == sorted(map(ref.digest, m2))


@settings(max_examples=200, deadline=None)
@given(names, st.lists(blobs, max_size=4), st.booleans())
def test_proteus_compat_matches_reference(name, modules, llvm20):
    assert _core.proteus_static_hash(name, modules, llvm20) == ref.proteus_static_hash(name, modules, llvm20)
