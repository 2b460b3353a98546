"""The identity of an OpenMP target region across builds (issue 27, item 2;
docs/hashing.md, "OpenMP target regions"). clang and flang name a region's kernel
`__omp_offloading_<st_dev>_<st_ino>_<parent>_l<line>[_<count>]`: two builds of one
source from two directories get two names, and two static hashes; the region identity
is one. Each build copies the source into a directory of its own and compiles it there
(tests/support/openmp_build.py)."""
from __future__ import annotations

import json
import os
import re

import pytest

import kir
from hash_reference import omp_region_identity as reference_identity
from kir import _core, ir
from kir.hashing import omp_region, omp_regions
from openmp_build import FIXTURES, clang_object, flang_ir_object, flang_object

NAME = re.compile(r"__omp_offloading_([0-9a-f]{1,8})_([0-9a-f]{1,8})_(.+)_l(\d+)(?:_(\d+))?")


def region_names(path) -> list[str]:
    return sorted({f.name for m in ir.ir_modules(kir.open(path)) for f in m.functions
                   if f.is_kernel and not f.is_declaration} |
                  {k.name for i in kir.open(path).images if i.kind != "bitcode" for k in i.kernels})


def identities(kir_cli, path) -> dict[str, str]:
    """Normalized region name -> region identity, as `kir inspect --ir --kernels --json`
    (IR) and `kir hash --json` (device images) print them."""
    out = {}
    report = json.loads(kir_cli("inspect", "--ir", "--kernels", "--json", path).stdout)
    for m in report["ir_modules"]:
        for f in m["functions"]:
            if f["omp_region"]:
                out[omp_region(f["name"]).normalized] = f["omp_region"]
    hashes = kir_cli("hash", "--json", path)
    assert hashes.returncode == 0, hashes.stderr
    for h in json.loads(hashes.stdout)["kernels"]:
        if h["omp_region"]:
            out[omp_region(h["kernel"]).normalized] = h["omp_region"]
    return out


def static_hashes(kir_cli, path) -> dict[str, str]:
    result = kir_cli("hash", "--json", path)
    return {h["kernel"]: h["static"] for h in json.loads(result.stdout)["kernels"]}


def test_names_carry_the_source_files_device_and_inode(tmp_path):
    """The ids are st_dev and st_ino of the source file (OMPIRBuilder.cpp,
    getTargetEntryUniqueInfo), `%x`-printed; the parent is the mangled function; two regions
    on one line are counted."""
    obj = clang_object(tmp_path, "sm_90", lto=True)
    st = os.stat(tmp_path / "region.cpp")
    names = region_names(obj)
    assert len(names) == 2
    for name in names:
        theirs = NAME.fullmatch(name)
        ours = omp_region(name)
        assert (ours.device_id, ours.file_id) == (int(theirs[1], 16), int(theirs[2], 16)) == \
            (st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF)
        assert (ours.parent, ours.line) == (theirs[3], int(theirs[4])) == ("_ZN8kir_test7regionsEi", 10)
        assert ours.count == int(theirs[5] or 0)
        assert ours.normalized == name.replace(f"_{theirs[1]}_{theirs[2]}_", "_0_0_", 1)
    assert sorted(omp_region(n).count for n in names) == [0, 1]


@pytest.mark.parametrize("name", [
    "__omp_offloading_", "__omp_offloading_fe00_1_f", "__omp_offloading_fe00_1_f_l", "__omp_offloading_fe00_1__l4",
    "__omp_offloading_FE00_1_f_l4", "__omp_offloading_123456789_1_f_l4", "__omp_offloading_fe00_1_f_l04",
    "__omp_offloading_fe00_1_f_l4_0", "__omp_offloading_fe00_1_f_l4_x", "_Z4axpyfPKfPfi", "__omp_offloading_0x1_1_f_l4",
])
def test_not_region_names(name):
    assert omp_region(name) is None


def test_parent_names_with_underscores_and_l():
    r = omp_region("__omp_offloading_fe00_2b6026_offload__l4")  # flang: the parent is `offload_`
    assert (r.parent, r.line, r.count) == ("offload_", 4, 0)
    r = omp_region("__omp_offloading_1_a_f_l3_l5_2")
    assert (r.parent, r.line, r.count, r.normalized) == ("f_l3", 5, 2, "__omp_offloading_0_0_f_l3_l5_2")


def test_identity_encoding_matches_the_reference():
    """The C++ encoding against tests/support/hash_reference.py's, for a few inputs."""
    for name, kind, code in [("__omp_offloading_0_0_f_l1", "ir", b"x"), ("__omp_offloading_0_0_g_l2_1", "cubin", b"")]:
        assert _core.omp_region_identity(name, kind, _core.xxh3_128(code)).hex == reference_identity(name, kind, code)


def test_zeroing_keeps_lengths():
    code = b"\0__omp_offloading_fe00_2b601c_offload_l4\0__omp_offloading_fe00_x__omp_offloading_1_2_"
    assert _core.zero_omp_region_ids(code) == \
        b"\0__omp_offloading_0000_000000_offload_l4\0__omp_offloading_fe00_x__omp_offloading_0_0_"


CHANGED = {"region.cpp": ("v *= 2;", "v *= 3;"), "offload.f90": ("s = s + i", "s = s + 2 * i")}
BUILDS = {
    "clang_sm90_lto": ("region.cpp", lambda d, text: clang_object(d, "sm_90", lto=True, text=text)),
    "clang_gfx90a_lto": ("region.cpp", lambda d, text: clang_object(d, "gfx90a", lto=True, text=text)),
    "clang_sm90": ("region.cpp", lambda d, text: clang_object(d, "sm_90", lto=False, text=text)),
    "flang_sm90": ("offload.f90", lambda d, text: flang_object(d, "sm_90", text=text)),
    "flang_gfx90a": ("offload.f90", lambda d, text: flang_object(d, "gfx90a", text=text)),
    "flang_sm90_ir": ("offload.f90", lambda d, text: flang_ir_object(d, "sm_90", text=text)),
}


@pytest.mark.parametrize("name", list(BUILDS))
def test_two_checkouts_one_identity_a_changed_region_another(name, kir_cli, tmp_path):
    source, build = BUILDS[name]
    # Paths of two lengths: flang writes the absolute source path into the code.
    first, second = build(tmp_path / "checkout", None), build(tmp_path / "another" / "checkout", None)
    names1, names2 = region_names(first), region_names(second)
    assert names1 and names1 != names2  # other inodes: other names
    ids1, ids2 = identities(kir_cli, first), identities(kir_cli, second)
    assert set(ids1) == {omp_region(n).normalized for n in names1}
    assert {r.normalized: r.identity for r in omp_regions(kir.open(first))} == ids1  # the Python API says the same
    assert ids1 == ids2
    table = kir_cli("inspect", "--ir", "--kernels", first).stdout  # the table says it too
    assert all(f"[OpenMP region {i}]" in table for i in ids1.values())
    statics1, statics2 = static_hashes(kir_cli, first), static_hashes(kir_cli, second)
    assert set(statics1).isdisjoint(statics2)  # the static hash names the build's kernel
    old, new = CHANGED[source]
    text = (FIXTURES / source).read_text()
    assert old in text
    changed = identities(kir_cli, build(tmp_path / "changed", text.replace(old, new)))
    assert set(changed) == set(ids1)
    different = {n for n in ids1 if changed[n] != ids1[n]}
    assert different, "the changed region kept its identity"
    if source == "region.cpp":  # only the changed region's code enters its identity
        assert different == {n for n in ids1 if n.endswith("_1")}


MODULE = """target datalayout = "e-i64:64"
target triple = "nvptx64-nvidia-cuda"
%struct.ident_t.4 = type { i32, i32, i32, i32, ptr }
@0 = private unnamed_addr constant [LEN x i8] c";PATH;s;4;17;;\\00", align 1
@1 = private unnamed_addr constant %struct.ident_t.4 { i32 0, i32 2, i32 0, i32 SIZE, ptr @0 }, align 8
@anon.MD5.0 = private constant i32 7
@unrelated = global i32 0
declare void @__kmpc_barrier(ptr)
define weak_odr protected ptx_kernel void @__omp_offloading_IDS_offload__l6(ptr %0) #0 {
  call void @__kmpc_barrier(ptr @1)
  %v = load i32, ptr @anon.MD5.0
  ret void
}
attributes #0 = { "kernel" }
"""


def module_text(path: str, ids: str, md5: str) -> str:
    return (MODULE.replace("PATH", path).replace("LEN", str(len(path) + 18)).replace("SIZE", str(len(path) + 16))
            .replace("IDS", ids).replace("MD5", md5))


def test_region_code_leaves_out_what_a_checkout_changes():
    """flang writes the source's absolute path into OpenMP location strings, their length
    into ident_t; clang names private globals after the module's md5; the ids: none of it
    enters a region's code (kir.ir.omp_region_code), what the kernel reaches does."""
    a = module_text("/home/a/src/offload.f90", "fe00_2b601c", "0" * 32)
    b = module_text("/scratch/some/other/src/offload.f90", "10303_7a1", "f" * 32)
    ka, kb = "__omp_offloading_fe00_2b601c_offload__l6", "__omp_offloading_10303_7a1_offload__l6"
    code = ir.omp_region_code(ka, a)
    assert code == ir.omp_region_code(kb, b)
    assert "@unrelated" not in code and "offload.f90;s;4;17" in code and "@__kmpc_barrier" in code
    assert ir.omp_region_identity(ka, a) == ir.omp_region_identity(kb, b)
    changed = a.replace("i32 7", "i32 8")  # what the kernel loads
    assert ir.omp_region_identity(ka, changed) != ir.omp_region_identity(ka, a)
    assert ir.omp_region_identity(ka, a.replace("@unrelated = global i32 0", "@unrelated = global i32 1")) == \
        ir.omp_region_identity(ka, a)
