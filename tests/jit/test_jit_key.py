"""The JIT key and the launch identity (docs/hashing.md, v2): the C API (kir_jit_key,
kir_launch_identity, through the bindings) against committed golden vectors and
against the independent reference (tests/support/hash_reference.py, PyPI xxhash); arrays and
objects read from memory; the errors a JIT client gets; injectivity and domain
separation of the encodings."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import hash_reference as ref
from kir import _core, hashing
from kir.errors import KirError, OptionError
from kir.hashing import ARRAY, OBJECT, SCALAR, ArgType, JitArg

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "hash_vectors.json").read_text())
STATIC = ref.static_hash("_Z4axpyfPKfPfi", "ir", [b"BC\xc0\xde" + bytes(64)])
F32, F64, I32, I64, U64, PTR, BYTES = 11, 12, 3, 4, 8, 13, 14
BASE = 0x7F00_0000_0000


def ptr(address: int) -> bytes:
    return struct.pack("<Q", address)


def doubles(*xs) -> bytes:
    return struct.pack(f"<{len(xs)}d", *xs)


# --- golden vectors ------------------------------------------------------------------

def test_the_static_vectors_did_not_change():
    """Format 2 leaves the static hash alone: the committed vectors are format 1's."""
    assert VECTORS["static"][0]["hash"] == ref.static_hash("_Z4axpyfPKfPfi", "ir", [b"BC\xc0\xde" + bytes(range(64))])
    assert ref.VERSION == 1 and VECTORS["format_version"] == ref.SPEC_VERSION == 2


@pytest.mark.parametrize("vector", VECTORS["jit_key"], ids=lambda v: v["hash"][:8])
def test_jit_key_golden_vectors(vector):
    args = [(p, t, bytes.fromhex(v)) for p, t, v in vector["args"]]
    fields = dict(grid=vector["grid"], block=vector["block"], shared_bytes=vector["shared_bytes"],
                  bounds=vector["bounds"], config=[(k, bytes.fromhex(v)) for k, v in vector["config"]],
                  captures=[(lam, s, o, t, bytes.fromhex(v)) for lam, s, o, t, v in vector["captures"]])
    assert hashing.jit_key(vector["static"], vector["arch"], args, **fields) == vector["hash"]
    assert ref.jit_key(vector["static"], vector["arch"], args=args, **fields) == vector["hash"]


@pytest.mark.parametrize("vector", VECTORS["jit_key_launch"], ids=lambda v: v["hash"][:8])
def test_jit_key_of_a_launch_golden_vectors(vector):
    """kir_jit_key reading the launch's arguments, arrays and objects by pointer from
    memory, element counts from other arguments — as a JIT client calls it."""
    params = [bytes.fromhex(p) for p in vector["params"]]
    memory = {int(a): bytes.fromhex(b) for a, b in vector["memory"].items()}
    got = hashing.jit_key_of_launch(vector["static"], vector["arch"], params,
                                    [JitArg(**a) for a in vector["jit_args"]], memory=memory, **vector["launch"])
    assert got == vector["hash"]
    launch = vector["launch"]
    assert ref.jit_key(vector["static"], vector["arch"], args=ref.jit_arg_values(params, vector["jit_args"], memory),
                       grid=launch.get("grid") if launch.get("specialize_grid") else None,
                       block=launch.get("block") if launch.get("specialize_block") else None,
                       shared_bytes=launch.get("shared_bytes", 0), bounds=launch.get("bounds")) == vector["hash"]


@pytest.mark.parametrize("vector", VECTORS["launch_identity"], ids=lambda v: v["hash"][:8])
def test_launch_identity_golden_vectors(vector):
    args = [None if a is None else bytes.fromhex(a) for a in vector["args"]]
    got = hashing.launch_identity(vector["static"], vector["arch"], args, grid=vector["grid"],
                                  block=vector["block"], shared_bytes=vector["shared_bytes"])
    assert got == vector["hash"]
    assert ref.launch_identity(vector["static"], vector["arch"], args, vector["grid"], vector["block"],
                               vector["shared_bytes"]) == vector["hash"]


def test_the_builder_class_agrees_with_kir_jit_key():
    """The C++ builder (kir::DynamicHash, what kir_dynamic_hash_* wrap) record by record
    equals kir_jit_key on the same launch."""
    h = _core.DynamicHash(_core.Hash128.from_hex(STATIC), "sm_90")
    h.arg(1, ArgType.f64, doubles(2.5)).arg(2, ArgType.f64, doubles(1, 2, 3))
    h.capture("L", 0, 8, ArgType.i32, struct.pack("<i", 4))
    h.specialize(hashing.SPECIALIZE_BLOCK | hashing.SPECIALIZE_BOUNDS).block(128, 1, 1).bounds(128, 2)
    h.shared(512).config("opt-level", b"3")
    key = hashing.jit_key_of_launch(
        STATIC, "sm_90", [doubles(2.5), ptr(BASE)],
        [JitArg(1, SCALAR, F64), JitArg(2, ARRAY, F64, count=3)], memory={BASE: doubles(1, 2, 3)},
        grid=(9, 9, 9), block=(128, 1, 1), specialize_block=True, bounds=(128, 2), shared_bytes=512,
        config=[("opt-level", b"3")], captures=[("L", 0, 8, I32, struct.pack("<i", 4))])
    assert h.finish().hex == key


def test_the_key_returns_the_values_it_hashed():
    """kir_jit_key_input.values (ABI 10), through the binding: by position, each value's
    bytes as hashed — an array read through the pointer (from `memory`), by-value ones
    from the argument; the key is the one computed without them. The binding starts with
    a 256-byte buffer: 512 doubles need more, so the C call first refuses with the size
    needed and the binding retries."""
    big = [float(i) / 7 for i in range(512)]
    params = [doubles(2.5), ptr(BASE), struct.pack("<i", 512), struct.pack("<qq", 3, -4)]
    jit_args = [JitArg(4, OBJECT, BYTES, by_value=True, count=16), JitArg(1, SCALAR, F64),
                JitArg(2, ARRAY, F64, count_type=I32, count_position=3)]
    memory = {BASE: doubles(*big)}
    plain = hashing.jit_key_of_launch(STATIC, "sm_90", params, jit_args, memory=memory)
    key, values = hashing.jit_key_of_launch(STATIC, "sm_90", params, jit_args, memory=memory, values=True)
    assert key == plain
    assert values == [hashing.JitValue(1, 0, F64, False, 1, doubles(2.5)),
                      hashing.JitValue(2, 1, F64, True, 512, doubles(*big)),
                      hashing.JitValue(4, 2, BYTES, False, 16, struct.pack("<qq", 3, -4))]
    with pytest.raises(KirError, match="runtime-constant argument 2: read_memory"):
        hashing.jit_key_of_launch(STATIC, "sm_90", params, jit_args, memory={}, values=True)


# --- what the key covers --------------------------------------------------------------

def launch_key(**changes):
    """The JIT key of one launch of axpy(a: f64 runtime constant, x, y, n: i32 runtime
    constant, coefficients: 3 f64 by pointer), with `changes` applied."""
    fields = dict(params=[doubles(2.5), ptr(BASE), ptr(BASE + 0x1000), struct.pack("<i", 256), ptr(BASE + 0x2000)],
                  jit_args=[JitArg(1, SCALAR, F64), JitArg(4, SCALAR, I32), JitArg(5, ARRAY, F64, count=3)],
                  memory={BASE + 0x2000: doubles(1, 2, 3), BASE: bytes(64)}, grid=(4, 1, 1), block=(256, 1, 1),
                  specialize_grid=False, specialize_block=True, shared_bytes=0, bounds=(256, 1),
                  config=[("opt-level", b"3")], captures=[])
    fields.update(changes)
    arch = fields.pop("arch", "sm_90")
    static = fields.pop("static", STATIC)
    return hashing.jit_key_of_launch(static, arch, fields.pop("params"), fields.pop("jit_args"), **fields)


def test_every_input_changes_the_jit_key():
    base = launch_key()
    variants = {
        "arch": launch_key(arch="sm_80"),
        "static": launch_key(static=ref.static_hash("other", "ir", [b"m"])),
        "scalar value": launch_key(params=[doubles(3.5), ptr(BASE), ptr(BASE + 0x1000), struct.pack("<i", 256),
                                           ptr(BASE + 0x2000)]),
        "array contents": launch_key(memory={BASE + 0x2000: doubles(1, 2, 4)}),
        "array length": launch_key(jit_args=[JitArg(1, SCALAR, F64), JitArg(4, SCALAR, I32),
                                             JitArg(5, ARRAY, F64, count=2)]),
        "block": launch_key(block=(128, 1, 1)),
        "grid, specialized": launch_key(specialize_grid=True),
        "block not specialized": launch_key(specialize_block=False),
        "bounds": launch_key(bounds=(256, 2)),
        "no bounds": launch_key(bounds=(0, 0)),
        "shared memory": launch_key(shared_bytes=1024),
        "config": launch_key(config=[("opt-level", b"2")]),
        "capture": launch_key(captures=[("L", 0, 0, I32, b"\x01\0\0\0")]),
    }
    assert base not in variants.values() and len(set(variants.values())) == len(variants), variants


def test_what_the_jit_key_does_not_cover():
    """Non-constant arguments (the x and y pointers), the grid when dims are not
    specialized, and where an array lives — only its contents — leave the key alone."""
    base = launch_key()
    assert launch_key(grid=(1000, 2, 1)) == base
    assert launch_key(params=[doubles(2.5), ptr(BASE + 0x8000), ptr(BASE + 0x9000), struct.pack("<i", 256),
                              ptr(BASE + 0x5000)], memory={BASE + 0x5000: doubles(1, 2, 3)}) == base
    # the order a client keeps its runtime-constant arguments in does not matter
    assert launch_key(jit_args=[JitArg(5, ARRAY, F64, count=3), JitArg(1, SCALAR, F64),
                                JitArg(4, SCALAR, I32)]) == base


def test_shared_memory_and_dims_change_the_launch_identity():
    args = [doubles(2.5), ptr(BASE)]
    base = hashing.launch_identity(STATIC, "sm_90", args, grid=(4, 1, 1), block=(64, 1, 1))
    assert hashing.launch_identity(STATIC, "sm_90", args, grid=(4, 1, 1), block=(64, 1, 1), shared_bytes=128) != base
    assert hashing.launch_identity(STATIC, "sm_90", args, grid=(4, 1, 1), block=(32, 1, 1)) != base
    assert hashing.launch_identity(STATIC, "sm_90", [doubles(2.5), ptr(BASE + 8)], grid=(4, 1, 1),
                                   block=(64, 1, 1)) != base


def test_the_domains_never_meet():
    """The same inputs as a JIT key, a launch identity and format 1's dynamic hash give
    three different hashes: each encoding starts with its own HEADER."""
    args = [(1, "bytes", doubles(2.5))]
    key = ref.jit_key(STATIC, "sm_90", args=args, grid=[4, 1, 1], block=[64, 1, 1])
    identity = ref.launch_identity(STATIC, "sm_90", [doubles(2.5)], [4, 1, 1], [64, 1, 1])
    dynamic = ref.dynamic_hash(STATIC, "sm_90", args=args, grid=[4, 1, 1], block=[64, 1, 1])
    assert len({key, identity, dynamic}) == 3
    headers = {ref.jit_key_encoding(STATIC, "")[:24], ref.launch_identity_encoding(STATIC, "", [], [1] * 3, [1] * 3)[:24],
               ref.dynamic_encoding(STATIC, "")[:21], ref.static_encoding("", "ir", [])[:20]}
    assert len(headers) == 4


# --- errors ---------------------------------------------------------------------------

def A(position, kind, type, **fields) -> dict:  # noqa: A002 - JitArg's field names
    """JitArg fields (the objects are made in the test: none outlives it)."""
    return dict(position=position, kind=kind, type=type, **fields)


@pytest.mark.parametrize("params, jit_args, memory, message", [  # jit_args: JitArg fields
    ([doubles(1)], [A(2, SCALAR, F64)], {}, "runtime-constant argument 2: not a parameter position (1..1)"),
    ([doubles(1)], [A(1, SCALAR, F64), A(1, SCALAR, F64)], {}, "argument 1: given twice"),
    ([None], [A(1, SCALAR, F64)], {}, "argument 1: its value (args[0]) is NULL"),
    ([ptr(0)], [A(1, ARRAY, F64, count=2)], {}, "argument 1: passed by pointer, and the pointer is NULL"),
    ([ptr(BASE)], [A(1, ARRAY, F64, count=2)], {BASE: doubles(1)}, "read_memory(0x7f0000000000, 16 bytes) failed"),
    ([ptr(BASE), struct.pack("<i", -3)], [A(1, ARRAY, F64, count_position=2, count_type=I32)], {},
     "its element count (argument 2) is negative: -3"),
    ([ptr(BASE), doubles(3)], [A(1, ARRAY, F64, count_position=2, count_type=F64)], {},
     "its element count's type 12 is not an integer type"),
    ([ptr(BASE)], [A(1, ARRAY, F64, count_position=3, count_type=I32)], {},
     "its element count's position 3 is not a parameter (1..1)"),
    ([ptr(BASE)], [A(1, ARRAY, BYTES, count=3)], {}, "an array's element type must have a fixed size"),
    ([b"\0" * 4], [A(1, SCALAR, F64)], {}, "argument 1: needs 8 bytes, the parameter has 4"),
    ([b"\0" * 4], [A(1, OBJECT, BYTES, by_value=1, count=16)], {}, "needs 16 bytes, the parameter has 4"),
    ([b"\0" * 4], [A(1, OBJECT, BYTES, count=16)], {}, "passed by pointer, but the parameter is smaller"),
    ([doubles(1)], [A(1, SCALAR, 0)], {}, "type 0 is not a kir_arg_type"),
    ([doubles(1)], [A(1, 7, F64)], {}, "kind 7 is not a kir_jit_arg_kind"),
    ([ptr(BASE), struct.pack("<I", 1 << 31)], [A(1, ARRAY, F64, count_position=2, count_type=7)], {},
     "more than 1 GiB"),
])
def test_bad_launches_get_a_precise_error(params, jit_args, memory, message):
    with pytest.raises(KirError) as error:
        hashing.jit_key_of_launch(STATIC, "sm_90", params, [JitArg(**a) for a in jit_args], memory=memory)
    assert str(error.value).startswith("JIT key: ") and message in str(error.value), str(error.value)


def test_python_api_errors():
    for args, kwargs in [([(0, F64, doubles(1))], {}), ([(1, F64, doubles(1)), (1, F64, doubles(2))], {}),
                         ([(1, "f65", doubles(1))], {}), ([(1, 99, doubles(1))], {}),
                         ([], {"grid": (1, 2)})]:
        with pytest.raises(ValueError):
            hashing.jit_key(STATIC, "sm_90", args, **kwargs)
    with pytest.raises(ValueError):
        hashing.jit_key("XYZ", "sm_90", [])
    with pytest.raises(OptionError, match="NUL"):
        hashing.jit_key(STATIC, "sm_90", [], config=[("a\0b", b"")])


def test_types_by_name_number_or_enum_agree():
    a = hashing.jit_key(STATIC, "sm_90", [(1, "f64", doubles(1))])
    assert a == hashing.jit_key(STATIC, "sm_90", [(1, F64, doubles(1))]) == \
        hashing.jit_key(STATIC, "sm_90", [(1, ArgType.f64, doubles(1))])


# --- properties -----------------------------------------------------------------------

u32 = st.integers(0, 2**32 - 1)


def c_strings(size):
    return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=size)


dims = st.none() | st.tuples(u32, u32, u32).map(list)
arg_types = st.integers(1, 15)
jit_inputs = st.fixed_dictionaries({
    "arch": st.sampled_from(["sm_90", "sm_80", "gfx90a", "gfx90a:xnack+", ""]),
    "args": st.dictionaries(st.integers(1, 64), st.tuples(arg_types, st.binary(max_size=40)), max_size=6)
              .map(lambda d: [(p, t, v) for p, (t, v) in sorted(d.items())]),
    "grid": dims, "block": dims,
    "shared_bytes": st.integers(0, 2**64 - 1),
    "bounds": st.none() | st.tuples(u32, u32).map(list),
    # keys and lambda names are C strings in kir_jit_key_input: no NUL
    "config": st.lists(st.tuples(c_strings(10), st.binary(max_size=20)), max_size=4),
    "captures": st.lists(st.tuples(c_strings(12), u32, u32, arg_types, st.binary(max_size=16)), max_size=3),
})
identity_inputs = st.fixed_dictionaries({
    "arch": st.sampled_from(["sm_90", "sm_80", ""]),
    "args": st.lists(st.none() | st.binary(max_size=40), max_size=6),
    "grid": st.tuples(u32, u32, u32).map(list), "block": st.tuples(u32, u32, u32).map(list),
    "shared_bytes": st.integers(0, 2**64 - 1),
})


@settings(max_examples=300, deadline=None)
@given(jit_inputs)
def test_core_matches_reference_jit_key(fields):
    fields = dict(fields)
    arch, args = fields.pop("arch"), fields.pop("args")
    assert hashing.jit_key(STATIC, arch, args, **fields) == ref.jit_key(STATIC, arch, args=args, **fields)


@settings(max_examples=300, deadline=None)
@given(identity_inputs)
def test_core_matches_reference_launch_identity(fields):
    assert hashing.launch_identity(STATIC, fields["arch"], fields["args"], grid=fields["grid"],
                                   block=fields["block"], shared_bytes=fields["shared_bytes"]) == \
        ref.launch_identity(STATIC, fields["arch"], fields["args"], fields["grid"], fields["block"],
                            fields["shared_bytes"])


def _normal(fields: dict) -> dict:
    """Inputs that mean the same key: bounds (0, 0) is no bounds."""
    out = dict(fields)
    if out.get("bounds") is not None and tuple(out["bounds"]) == (0, 0):
        out["bounds"] = None
    return out


@settings(max_examples=500, deadline=None)
@given(jit_inputs, jit_inputs)
def test_distinct_jit_key_inputs_never_encode_alike(a, b):
    a, b = dict(a), dict(b)
    ea = ref.jit_key_encoding(STATIC, a.pop("arch"), **a)
    eb = ref.jit_key_encoding(STATIC, b.pop("arch"), **b)
    if ea == eb:
        assert _normal(a) == _normal(b)


@settings(max_examples=500, deadline=None)
@given(identity_inputs, identity_inputs)
def test_distinct_launch_identity_inputs_never_encode_alike(a, b):
    ea = ref.launch_identity_encoding(STATIC, a["arch"], a["args"], a["grid"], a["block"], a["shared_bytes"])
    eb = ref.launch_identity_encoding(STATIC, b["arch"], b["args"], b["grid"], b["block"], b["shared_bytes"])
    if ea == eb:  # a parameter without a value (trailing ones included) is left out
        def trimmed(x):
            args = list(x["args"])
            while args and args[-1] is None:
                args.pop()
            return {**x, "args": args}
        assert trimmed(a) == trimmed(b)


@settings(max_examples=200, deadline=None)
@given(jit_inputs, identity_inputs)
def test_a_jit_key_never_encodes_like_a_launch_identity(a, b):
    a = dict(a)
    ea = ref.jit_key_encoding(STATIC, a.pop("arch"), **a)
    assert ea != ref.launch_identity_encoding(STATIC, b["arch"], b["args"], b["grid"], b["block"], b["shared_bytes"])
