"""kir's vocabulary (libkir/include/kir/model.hpp -> kir.model): the Python enums are
the C++ name tables, members cross the bindings both ways, the C ABI numbers are the
enum values, and JSON still carries the plain names."""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

import kir
from kir import _core
from kir.model import AllocationKind, CodeKind, ImageKind, TargetKind

ENUMS = [(ImageKind, "image"), (CodeKind, "code"), (TargetKind, "target"),
         (AllocationKind, "allocation")]


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
