"""kir's vocabulary (libkir/include/kir/model.hpp -> kir.model): the Python enums are
the C++ name tables, members cross the bindings both ways, the C ABI numbers are the
enum values, and JSON still carries the plain names."""
from __future__ import annotations

import ctypes
import json
import struct
import subprocess
from pathlib import Path

import pytest

import kir
from kir import _core
from kir.model import AllocationKind, ArgType, Codec, CodeKind, ContainerFormat, ImageKind, JitArgKind, TargetKind

ENUMS = [(ImageKind, "image"), (CodeKind, "code"), (TargetKind, "target"),
         (AllocationKind, "allocation"), (JitArgKind, "jit-arg"), (ContainerFormat, "container"),
         (Codec, "codec")]


@pytest.mark.parametrize("enum, table", ENUMS)
def test_python_enums_are_the_core_tables(enum, table):
    names = _core.name_table(table)
    assert [m.value for m in enum] == list(names)
    assert len(set(names)) == len(names)
    for member in enum:
        # name <-> member, both ways; the identifier is the C++ enumerator
        assert enum(member.value) is member
        assert getattr(enum, member.value.replace("-", "_")) is member
        # a member is its name for str(), format(), ==, hash() and JSON
        assert str(member) == f"{member}" == member.value
        assert member == member.value and hash(member) == hash(member.value)
        assert json.dumps({member: member}) == json.dumps({member.value: member.value})
    with pytest.raises(ValueError):
        enum("no-such-kind")


def test_name_table_refuses_unknown_tables():
    with pytest.raises(ValueError, match="no name table 'images'"):
        _core.name_table("images")


def test_enums_cross_the_bindings():
    # Every ImageKind member goes into C++ (code_kind_of) and a CodeKind member comes back.
    device = {ImageKind.cubin: CodeKind.cubin, ImageKind.ptx: CodeKind.ptx,
              ImageKind.code_object: CodeKind.code_object}
    for member in ImageKind:
        assert _core.code_kind_of(member) is device.get(member, CodeKind.unknown)
    assert kir.model.CODE_IMAGES == set(device)
    # A plain string converts when it is a name of the table, and only then.
    assert _core.code_kind_of("code-object") is CodeKind.code_object
    for bad in ("code_object", "unknown-5", "CUBIN", 2):
        with pytest.raises(TypeError):
            _core.code_kind_of(bad)
    expected = {"sm_90": TargetKind.cuda, "compute_75": TargetKind.cuda,
                "gfx90a:xnack+": TargetKind.amdgpu, "": TargetKind.none,
                "x86_64-unknown-linux-gnu": TargetKind.host}
    assert {t: _core.target_kind_of(t) for t in expected} == expected


def _images(binary: kir.Binary):
    return [(i.kind, i.target_kind, i.target) for i in binary.images]


@pytest.mark.parametrize("name", ["app", "hip.o", "omp_sm90.o", "embed_bitcode.o", "hip_ccob_v3.o",
                                  "kernels_sm90.cubin"])
def test_image_kinds_are_enum_members(built, name):
    binary = kir.open(built[name])
    assert binary.images
    for image in binary.images:
        assert type(image.kind) is ImageKind and type(image.target_kind) is TargetKind
        assert image.target_kind is _core.target_kind_of(image.target)
        data = image.read() if not image.obfuscated else b""
        # an independent look at the bytes agrees with the kind
        if image.kind in (ImageKind.cubin, ImageKind.code_object):
            machine = int.from_bytes(data[18:20], "little")
            assert data[:4] == b"\x7fELF" and machine == (190 if image.kind is ImageKind.cubin else 224)
        elif image.kind is ImageKind.bitcode:
            assert data[:4] == b"BC\xc0\xde" or data[:4] == b"\xde\xc0\x17\x0b"
        elif image.kind is ImageKind.ptx:
            assert b".version" in data and b".target" in data
        if image.kind in kir.model.CODE_IMAGES and not image.obfuscated:
            assert image.code.kind is image.kind
            for kernel in image.kernels:
                assert type(_core.kernel_code(image.code, kernel.name).kind) is CodeKind


class ImageInfo(ctypes.Structure):  # kir/kir.h kir_image_info
    _fields_ = [("struct_size", ctypes.c_uint32), ("container", ctypes.c_uint32),
                ("entry", ctypes.c_uint32), ("kind", ctypes.c_uint16), ("major", ctypes.c_uint16),
                ("minor", ctypes.c_uint16), ("arch", ctypes.c_uint32),
                ("compression", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("file_offset", ctypes.c_uint64), ("stored_size", ctypes.c_uint64),
                ("image_size", ctypes.c_uint64), ("obfuscated", ctypes.c_int32),
                ("kind_name", ctypes.c_char_p), ("target", ctypes.c_char_p),
                ("triple", ctypes.c_char_p), ("image_kind", ctypes.c_uint32),
                ("target_kind", ctypes.c_uint32)]


@pytest.fixture(scope="module")
def libkir():
    lib = ctypes.CDLL(str(Path(kir.__file__).parent / "lib" / "libkir.so"))
    lib.kir_binary_open.restype = ctypes.c_void_p
    lib.kir_binary_open.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    lib.kir_binary_image_count.argtypes = [ctypes.c_void_p]
    lib.kir_binary_image_count.restype = ctypes.c_size_t
    lib.kir_binary_image_info.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ImageInfo)]
    lib.kir_binary_close.argtypes = [ctypes.c_void_p]
    return lib


@pytest.mark.parametrize("name", ["app", "hip.o", "omp_sm90.o", "embed_bitcode.o"])
def test_c_abi_kind_numbers_are_the_enum_values(built, libkir, name):
    binary = kir.open(built[name])
    handle = libkir.kir_binary_open(str(built[name]).encode(), 0)
    assert handle
    try:
        assert libkir.kir_binary_image_count(handle) == len(binary.images)
        for image in binary.images:
            info = ImageInfo(struct_size=ctypes.sizeof(ImageInfo))
            assert libkir.kir_binary_image_info(handle, image.index, ctypes.byref(info)) == 0
            assert info.struct_size == ctypes.sizeof(ImageInfo)
            assert info.kind_name.decode() == image.kind
            assert list(ImageKind)[info.image_kind] is image.kind
            assert list(TargetKind)[info.target_kind] is image.target_kind
            assert info.kind == (image.entry.kind if image.entry else 0)
        # an older caller (struct without the new fields) gets only what it has room for
        old = ImageInfo(struct_size=ImageInfo.image_kind.offset, image_kind=77)
        assert libkir.kir_binary_image_info(handle, 0, ctypes.byref(old)) == 0
        assert old.struct_size == ImageInfo.image_kind.offset and old.image_kind == 77
    finally:
        libkir.kir_binary_close(handle)


@pytest.mark.parametrize("name", ["app", "hip.o", "omp_gfx90a.o", "fat_lto.o"])
def test_json_kinds_are_the_plain_names(built, kir_cli, name):
    r = kir_cli("inspect", "--json", built[name])
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    names = set(_core.name_table("image"))
    assert [i["kind"] for i in report["images"]] == [i.kind.value for i in kir.open(built[name]).images]
    assert all(i["kind"] in names for i in report["images"])
    assert "ImageKind" not in r.stdout


def test_kind_filter_takes_names(built, kir_cli):
    r = kir_cli("inspect", "--json", "--kind", "code-object", built["hip.o"])
    kinds = {i["kind"] for i in json.loads(r.stdout)["images"]}
    assert r.returncode == 0 and kinds == {"code-object"}
    r = kir_cli("inspect", "--kind", "cubin,nope", built["app"])
    assert r.returncode != 0
    assert "invalid image kind 'nope': expected one of cubin, ptx, lto-ir, old-cubin, code-object" in r.stderr


# --- ArgType, the JIT argument, the parameter layout: one definition each -----------------

def test_arg_types_are_the_core_table():
    """kir.model.ArgType is the core's table: names, values (the ARG record's type byte),
    sizes and struct formats; every Python table of argument types is derived from it."""
    from kir.commands.hash import PACK
    from kir.jit.values import SCALARS, TYPES
    assert [t.name for t in ArgType] == list(_core.name_table("arg"))
    assert [int(t) for t in ArgType] == list(range(1, len(ArgType) + 1))
    assert [(int(t), t.name, t.size or 0, t.struct_format) for t in ArgType] == list(_core.arg_types())
    for t in ArgType:
        assert str(t) == f"{t}" == t.name and ArgType[t.name] is t
        if t.struct_format:
            assert struct.calcsize(t.struct_format) == t.size
    assert (ArgType.f16.size, ArgType.f16.struct_format) == (2, "<e")
    assert (ArgType.bf16.size, ArgType.bf16.struct_format) == (2, None)
    assert ArgType.bytes.size is None and ArgType.bool.struct_format == "<?"
    # the CLI's and kir.jit's tables cover every type, f16 and bf16 included
    assert list(PACK) == [t.name for t in ArgType] and set(TYPES) == set(PACK)
    assert {name: size for name, (size, _) in SCALARS.items()} == {t.name: t.size for t in ArgType if t.size}


def test_arg_types_cross_the_bindings():
    static = _core.Hash128.from_hex("0" * 31 + "1")
    value = struct.pack("<e", 1.5)
    hashes = {_core.DynamicHash(static, "sm_90").arg(1, t, value).finish().hex
              for t in (ArgType.f16, 9, "f16")}
    assert len(hashes) == 1
    assert _core.DynamicHash(static, "sm_90").arg(1, ArgType.bf16, value).finish().hex not in hashes
    for bad in (0, 16, "f65", True):
        with pytest.raises(TypeError):
            _core.DynamicHash(static, "sm_90").arg(1, bad, value)


def test_one_jit_argument_and_one_parameter_layout_type(built):
    from kir import hashing, hook, record
    assert record.JitArg is hashing.JitArg is kir.model.JitArg
    assert record.Param is kir.Param is kir.KernelParam is kir.model.Param
    assert hook.Kernel.__dataclass_fields__["params"].type == "tuple[Param, ...]"
    a = kir.model.JitArg(2, 1, 12, 1, 3)  # kir_jit_arg's numbers...
    assert a == kir.model.JitArg(2, "array", ArgType.f64, True, 3)  # ...or the names
    assert a.kind is JitArgKind.array and a.type is ArgType.f64 and a.by_value is True
    assert a.c_fields() == (2, 1, 12, True, 3, 0, 0)
    # numbers that name nothing stay numbers, for kir_jit_key to refuse precisely
    assert kir.model.JitArg(1, 7, 0).c_fields()[:3] == (1, 7, 0)
    binary = kir.open(built["app"])
    kernels = [k for i in binary.images if i.kind in kir.model.CODE_IMAGES for k in i.kernels]
    assert kernels
    for k in kernels:
        assert all(type(p) is kir.model.Param for p in k.params)
        assert [p.ordinal for p in k.params] == list(range(len(k.params)))
        assert k.layout == " ".join(f"{p.offset}:{p.size}" for p in k.params)


# --- the C ABI's numbers ------------------------------------------------------------------

def c_name(prefix: str, member) -> str:
    return prefix + str(member.name).upper()


#: every C constant that names a model enum's member: (prefix, enum, members the C ABI names)
C_CONSTANTS = [("KIR_ARG_", ArgType, list(ArgType)), ("KIR_JIT_", JitArgKind, list(JitArgKind)),
               ("KIR_CODE_KIND_", CodeKind, list(CodeKind)), ("KIR_KIND_", ImageKind, list(ImageKind)),
               ("KIR_TARGET_", TargetKind, list(TargetKind)),
               ("KIR_COMPRESSION_", Codec, [Codec.none, Codec.lz4, Codec.zstd, Codec.unknown]),
               ("KIR_ALLOC_", AllocationKind,
                [AllocationKind.device, AllocationKind.managed, AllocationKind.host_pinned])]


def test_c_constants_are_the_enum_values(tmp_path):
    """kir.h's and hooks.h's constants, compiled by a C compiler, are the model's values
    (the core also static_asserts it, libkir/core/model.cpp)."""
    names = {c_name(prefix, m): (int(m) if enum is ArgType else m.number)
             for prefix, enum, members in C_CONSTANTS for m in members}
    source = tmp_path / "constants.c"
    source.write_text("#include <stdio.h>\n#include <kir/kir.h>\n#include <kir/hooks.h>\nint main(void) {\n" +
                      "".join(f'  printf("{n} %d\\n", (int)({n}));\n' for n in names) + "  return 0;\n}\n")
    include = Path(kir.__file__).parent / "include"
    subprocess.run(["cc", "-Wall", "-Werror", "-I", str(include), str(source), "-o", str(tmp_path / "constants")],
                   check=True)
    out = subprocess.run([str(tmp_path / "constants")], capture_output=True, text=True, check=True).stdout
    assert dict((n, int(v)) for n, v in (line.split() for line in out.splitlines())) == names
    assert names["KIR_ARG_BF16"] == 10 and names["KIR_CODE_KIND_CODE_OBJECT"] == 4


def test_numeric_code_kinds_in_the_c_abi(libkir):
    """kir_static_hash_of_kind takes KIR_CODE_KIND_*: the hash of the kind's name."""
    class Hash(ctypes.Structure):
        _fields_ = [("high", ctypes.c_uint64), ("low", ctypes.c_uint64)]

    class Bytes(ctypes.Structure):
        _fields_ = [("data", ctypes.c_char_p), ("size", ctypes.c_size_t)]

    libkir.kir_static_hash.restype = libkir.kir_static_hash_of_kind.restype = Hash
    libkir.kir_static_hash.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Bytes), ctypes.c_size_t]
    libkir.kir_static_hash_of_kind.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(Bytes),
                                               ctypes.c_size_t]
    libkir.kir_last_error.restype = ctypes.c_char_p
    code = b"\x7fELF some code"
    module = Bytes(code, len(code))
    for kind in CodeKind:
        by_number = libkir.kir_static_hash_of_kind(b"_Z1kv", kind.number, ctypes.byref(module), 1)
        by_name = libkir.kir_static_hash(b"_Z1kv", kind.value.encode(), ctypes.byref(module), 1)
        expected = _core.static_hash("_Z1kv", kind, [code])
        assert (by_number.high, by_number.low) == (by_name.high, by_name.low) == (expected.high, expected.low)
    bad = libkir.kir_static_hash_of_kind(b"_Z1kv", len(CodeKind), ctypes.byref(module), 1)
    assert (bad.high, bad.low) == (0, 0)
    assert libkir.kir_last_error() == b"code kind 5 is not a KIR_CODE_KIND_* value (0..4)"


def test_the_json_envelope():
    """One helper writes every command's tag; the commands that first named it `format`
    keep that key too (deprecated, docs/json-schema.md)."""
    from kir.envelope import LEGACY_FORMAT_KEY, envelope
    assert envelope("kir.cache/1", directory="d") == {"schema": "kir.cache/1", "format": "kir.cache/1",
                                                      "directory": "d"}
    assert envelope("kir.hash/1", kernel="k") == {"schema": "kir.hash/1", "kernel": "k"}
    assert envelope("kir.inspect/3", format="elf")["format"] == "elf"  # inspect's own field
    assert LEGACY_FORMAT_KEY == {"kir.records", "kir.replay", "kir.replay-all", "kir.tune", "kir.import-mneme",
                                 "kir.cache"}
    with pytest.raises(ValueError):
        envelope("kir.records/1", format="x")
    # no command writes a tag by hand
    package = Path(kir.__file__).parent
    by_hand = [p.name for p in (package / "commands").glob("*.py") if '"schema": ' in p.read_text()]
    assert by_hand == []


class Hash128(ctypes.Structure):  # kir_hash128
    _fields_ = [("high", ctypes.c_uint64), ("low", ctypes.c_uint64)]


class CacheEntry(ctypes.Structure):  # kir/cache.h kir_cache_entry
    _fields_ = [("struct_size", ctypes.c_uint32), ("code", ctypes.c_char_p), ("code_size", ctypes.c_size_t),
                ("code_kind", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("meta", ctypes.c_void_p),
                ("meta_count", ctypes.c_size_t), ("image_kind", ctypes.c_uint32)]


def test_cache_entries_carry_their_kind_as_a_number(libkir, tmp_path):
    """kir_cache_entry.image_kind: the entry's code kind as its KIR_KIND_* number, next to
    the name (kept): given instead of the name to kir_cache_store, filled by lookups."""
    libkir.kir_cache_open.restype = ctypes.c_void_p
    libkir.kir_cache_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    libkir.kir_cache_store.argtypes = [ctypes.c_void_p, Hash128, ctypes.POINTER(CacheEntry)]
    libkir.kir_cache_lookup.argtypes = [ctypes.c_void_p, Hash128, ctypes.POINTER(CacheEntry)]
    libkir.kir_cache_close.argtypes = [ctypes.c_void_p]
    libkir.kir_last_error.restype = ctypes.c_char_p
    directory = str(tmp_path / "cache").encode()
    code = b".version 8.0\n.target sm_90\n\0"
    cache = libkir.kir_cache_open(directory, None)
    assert cache, libkir.kir_last_error()
    try:
        entry = CacheEntry(ctypes.sizeof(CacheEntry), code, len(code), None, b"sm_90", None, 0, ImageKind.ptx.number)
        assert libkir.kir_cache_store(cache, Hash128(1, 2), ctypes.byref(entry)) == 0, libkir.kir_last_error()
        entry.image_kind = ImageKind.bitcode.number  # not a kind a cache holds
        assert libkir.kir_cache_store(cache, Hash128(1, 3), ctypes.byref(entry)) == -1
        assert b"image_kind 6 is not a kind a cache holds" in libkir.kir_last_error()
        older = CacheEntry(CacheEntry.image_kind.offset, code, len(code), None, b"sm_90", None, 0, 2)
        assert libkir.kir_cache_store(cache, Hash128(1, 4), ctypes.byref(older)) == -1  # no number: a name needed
        assert b"code_kind or arch is NULL" in libkir.kir_last_error()
    finally:
        libkir.kir_cache_close(cache)
    cache = libkir.kir_cache_open(directory, None)  # read back from disk
    try:
        found = CacheEntry(struct_size=ctypes.sizeof(CacheEntry))
        assert libkir.kir_cache_lookup(cache, Hash128(1, 2), ctypes.byref(found)) == 1
        assert (found.code_kind, found.image_kind) == (b"ptx", ImageKind.ptx.number)
        assert ctypes.string_at(found.code, found.code_size) == code
        old = CacheEntry(struct_size=CacheEntry.image_kind.offset, image_kind=77)  # an older caller
        assert libkir.kir_cache_lookup(cache, Hash128(1, 2), ctypes.byref(old)) == 1
        assert old.code_kind == b"ptx" and old.image_kind == 77
    finally:
        libkir.kir_cache_close(cache)
