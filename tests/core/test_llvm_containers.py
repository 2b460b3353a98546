"""Clang offload bundles, LLVM offloading binaries, embedded bitcode and AMDGPU
code objects, built by clang 22 at test time and checked against LLVM's own
tools: clang-offload-bundler, llvm-objdump --offloading, llvm-dis, llvm-readelf."""
from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

import kir
from llvm_tools import objdump_offloading, readelf_kernels, section_bytes, tool

BUNDLER = "clang-offload-bundler-22"
HIP_BUNDLES = ["hip.o", "hip_ccob_v2.o", "hip_ccob_v3.o", "libhip.so"]


@pytest.mark.parametrize("name", HIP_BUNDLES)
def test_hip_fatbin_matches_clang_offload_bundler(built, tmp_path, name):
    bundle = tmp_path / "bundle.bin"
    bundle.write_bytes(section_bytes(built[name], ".hip_fatbin"))
    ids = tool(BUNDLER, "--list", "--type=bc", f"--input={bundle}").split()
    binary = kir.open(built[name])
    assert len(binary.containers) == 1
    images = binary.containers[0].images
    assert sorted(i.identifier for i in images) == sorted(ids)
    for image in images:
        out = tmp_path / "entry.bin"
        tool(BUNDLER, "--unbundle", "--type=bc", f"--input={bundle}", f"--targets={image.identifier}",
             f"--output={out}")
        assert image.read() == out.read_bytes(), image.identifier
    targets = {i.target for i in images if i.kind == "code-object"}
    assert targets == ({"gfx90a:xnack+", "gfx942"} if name == "libhip.so" else {"gfx90a", "gfx942"})


@pytest.mark.parametrize("name,version", [("hip_ccob_v2.o", 2), ("hip_ccob_v3.o", 3), ("hip.o", 0)])
def test_compressed_bundle_versions(built, name, version):
    container = kir.open(built[name]).containers[0]
    assert container.format == "offload-bundle"
    assert container.site.version == version
    assert container.site.compression == ("zstd" if version else "")
    # The CCOB header's own size fields, read independently.
    data = section_bytes(built[name], ".hip_fatbin")
    if version == 2:
        assert struct.unpack_from("<4sHHI", data)[3] == container.size
    elif version == 3:
        assert struct.unpack_from("<4sHHQ", data)[3] == container.size


def test_object_bundle_matches_clang_offload_bundler(built, tmp_path):
    path = built["hip_rdc.o"]
    ids = tool(BUNDLER, "--list", "--type=o", f"--input={path}").split()
    container = kir.open(path).containers[0]
    assert container.format == "object-bundle"
    assert sorted(i.identifier for i in container.images) == sorted(ids)
    for image in container.images:
        if image.kind == "host":
            continue
        out = tmp_path / "entry.bc"
        tool(BUNDLER, "--unbundle", "--type=o", f"--input={path}", f"--targets={image.identifier}",
             f"--output={out}")
        assert image.kind == "bitcode" and image.read() == out.read_bytes()
        assert "define" in tool("llvm-dis-22", out, "-o", "-")


@pytest.mark.parametrize("name", ["omp_gfx90a.o", "omp_sm90.o", "clang_cuda_new.o"])
def test_offloading_binaries_match_llvm_objdump(built, tmp_path, name):
    theirs, _ = objdump_offloading(built[name], tmp_path)
    binary = kir.open(built[name])
    images = [i for c in binary.containers if c.format == "offload-binary" for i in c.images]
    assert len(images) == len(theirs) > 0
    for ours, t in zip(images, theirs):
        assert ours.target == t["arch"]
        assert ours.triple == t["triple"]
        assert ours.identifier == t["producer"]
        kind = {"elf": {"cubin", "code-object", "object"}, "llvm ir": {"bitcode"}}[t["kind"]]
        assert ours.kind in kind
    # The image bytes are the entry's, as the offloading binary's own table says.
    data = section_bytes(built[name], ".llvm.offloading")
    _, version, _, entries, _ = struct.unpack_from("<IIQQQ", data)
    _, _, _, _, _, offset, size = struct.unpack_from("<HHIQQQQ", data, entries)
    assert images[0].read() == data[offset:offset + size]


@pytest.mark.parametrize("name,section", [("embed_bitcode.o", ".llvmbc"), ("fat_lto.o", ".llvm.lto")])
def test_embedded_bitcode(built, tmp_path, name, section):
    container = kir.open(built[name]).containers[0]
    assert container.format == "bitcode-section" and container.section == section
    [image] = container.images
    assert image.read() == section_bytes(built[name], section)
    out = tmp_path / "m.bc"
    out.write_bytes(image.read())
    assert "define dso_local i32 @cube" in tool("llvm-dis-22", out, "-o", "-")
    if section == ".llvmbc":
        assert "-emit-obj" in image.core.strings["command"]


def test_bundle_code_objects_bitcode_is_valid(built, tmp_path):
    """The bitcode modules kir splits out of an RDC bundle pass llvm-bcanalyzer."""
    for image in kir.open(built["hip_rdc.o"]).images:
        if image.kind == "bitcode":
            out = tmp_path / "m.bc"
            out.write_bytes(image.read())
            assert "Block ID #8 (MODULE_BLOCK)" in tool("llvm-bcanalyzer-22", out)


def test_code_object_kernels_match_llvm_readelf(built, tmp_path):
    for image in kir.open(built["libhip.so"]).images:
        if image.kind != "code-object":
            continue
        path = tmp_path / "k.co"
        path.write_bytes(image.read())
        theirs = readelf_kernels(path)
        assert {k.name: [(p.offset, p.size) for p in k.params] for k in image.kernels} == theirs
        assert image.code.target == "amdgcn-amd-amdhsa--" + image.target


def test_lto_partitioned_code_object_lists_every_notes_kernels(built, tmp_path):
    """clang-22 HIP -fgpu-rdc links with LTO partitions: one NT_AMDGPU_METADATA note
    per partition, each with some kernels; kir reads them all."""
    [image] = [i for i in kir.open(built["proteus_hip_rdc.o"]).images if i.kind == "code-object"]
    path = tmp_path / "k.co"
    path.write_bytes(image.read())
    notes = tool("llvm-readelf-22", "--notes", path)
    assert notes.count("NT_AMDGPU_METADATA") > 1
    theirs = readelf_kernels(path)
    assert len(theirs) == 4
    assert {k.name: [(p.offset, p.size) for p in k.params] for k in image.kernels} == theirs
    assert image.code.target == "amdgcn-amd-amdhsa--gfx90a"


# --- bad input ----------------------------------------------------------------------

def mutated(path: Path, tmp_path: Path, offset: int, fmt: str, value) -> Path:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    out = tmp_path / ("mut_" + path.name)
    out.write_bytes(bytes(data))
    return out


def hip_fatbin_offset(path: Path) -> int:
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(".hip_fatbin")["sh_offset"]


def test_ccob_hash_mismatch(built, kir_cli, tmp_path):
    start = hip_fatbin_offset(built["hip_ccob_v3.o"])
    bad = mutated(built["hip_ccob_v3.o"], tmp_path, start + 24, "<Q", 0x1234)
    result = kir_cli("inspect", bad)
    assert result.returncode == 2 and "hash mismatch: the header says 0x1234" in result.stderr


def test_ccob_bomb(built, kir_cli, tmp_path):
    start = hip_fatbin_offset(built["hip_ccob_v3.o"])
    bad = mutated(built["hip_ccob_v3.o"], tmp_path, start + 16, "<Q", 1 << 40)
    result = kir_cli("inspect", bad)
    assert result.returncode == 2 and "over the limit" in result.stderr


def test_bundle_entry_past_end(built, kir_cli, tmp_path):
    start = hip_fatbin_offset(built["hip.o"])
    bad = mutated(built["hip.o"], tmp_path, start + 32 + 8, "<Q", 1 << 40)  # entry #0 size
    result = kir_cli("inspect", bad)
    assert result.returncode == 2 and "bundle entry #0" in result.stderr
    assert "runs past the end of the data" in result.stderr


def test_offloading_binary_size_past_end(built, kir_cli, tmp_path):
    with open(built["omp_sm90.o"], "rb") as f:
        start = ELFFile(f).get_section_by_name(".llvm.offloading")["sh_offset"]
    bad = mutated(built["omp_sm90.o"], tmp_path, start + 8, "<Q", 1 << 40)
    result = kir_cli("inspect", bad)
    assert result.returncode == 2 and "offloading binary size 0x10000000000" in result.stderr


def test_bitcode_block_past_end(built, kir_cli, tmp_path):
    with open(built["embed_bitcode.o"], "rb") as f:
        start = ELFFile(f).get_section_by_name(".llvmbc")["sh_offset"]
    data = bytearray(built["embed_bitcode.o"].read_bytes())
    # The first block's length word follows its 32-bit aligned header: offset 8.
    struct.pack_into("<I", data, start + 8, 0x7FFFFFFF)
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(data))
    result = kir_cli("inspect", bad)
    assert result.returncode == 2 and "past the end of the data" in result.stderr


# --- formats clang 22 does not write by default, written here and read by both ------

def plain_bundle(path: Path) -> bytes:
    """The uncompressed bundle at the start of an object's .hip_fatbin, trimmed."""
    raw = section_bytes(path, ".hip_fatbin")
    count, off, end = struct.unpack_from("<Q", raw, 24)[0], 32, 32
    for _ in range(count):
        o, size, length = struct.unpack_from("<QQQ", raw, off)
        end, off = max(end, o + size), off + 24 + length
    return raw[:max(end, off)]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_zlib_ccob_read_like_clang(built, tmp_path, version):
    """CCOB headers clang 22 does not write (v1, zlib), written here: kir and
    clang-offload-bundler read them alike."""
    import hashlib
    import zlib
    bundle = plain_bundle(built["hip.o"])
    payload = zlib.compress(bundle, 9)
    digest = struct.unpack_from("<Q", hashlib.md5(bundle).digest())[0]
    header = {1: lambda: struct.pack("<HHIQ", 1, 0, len(bundle), digest),
              2: lambda: struct.pack("<HHIIQ", 2, 0, 24 + len(payload), len(bundle), digest),
              3: lambda: struct.pack("<HHQQQ", 3, 0, 32 + len(payload), len(bundle), digest)}[version]()
    path = tmp_path / "z.ccob"
    path.write_bytes(b"CCOB" + header + payload)
    ids = tool(BUNDLER, "--list", "--type=bc", f"--input={path}").split()
    binary = kir.open(path)
    assert binary.format == "offload-bundle"
    [container] = binary.containers
    assert container.site.compression == "zlib" and container.site.version == version
    assert sorted(i.identifier for i in container.images) == sorted(ids)
    reference = kir.open(built["hip.o"]).containers[0].images
    assert [i.read() for i in container.images] == [i.read() for i in reference]


def test_scan_finds_bundles_in_data(built, tmp_path):
    """A compressed bundle linked in as plain data (`ld -r -b binary`)."""
    path = built["embedded_bundle"]
    assert kir.open(path).containers == []
    [container] = kir.open(path, scan=True).containers
    assert (container.format, container.found_by, container.section) == ("offload-bundle", "scan", ".data")
    work = path.parent / ".embedded_bundle.work"
    out = tmp_path / "co"
    tool(BUNDLER, "--unbundle", "--type=bc", f"--input={work / 'b.bin'}",
         "--targets=hipv4-amdgcn-amd-amdhsa--gfx90a", f"--output={out}")
    [co] = [i for i in container.images if i.kind == "code-object"]
    assert co.read() == out.read_bytes()


def test_two_modules_in_one_llvmbc(built, tmp_path):
    """`ld -r` concatenates .llvmbc sections: kir splits the modules apart."""
    [container] = kir.open(built["two_modules.o"]).containers
    modules = [i.read() for i in container.images]
    assert len(modules) == 2 and b"".join(modules) == section_bytes(built["two_modules.o"], ".llvmbc")
    functions = [set(re.findall(r"^define [^@]*@(\w+)", tool_dis(m, tmp_path), re.M)) for m in modules]
    assert functions[0] == {"square", "cube"} and "offload" in functions[1]


def tool_dis(data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "m.bc"
    path.write_bytes(data)
    return tool("llvm-dis-22", path, "-o", "-")


def test_code_object_without_note_uses_kernel_descriptors(built, tmp_path):
    """With the metadata note stripped, kernels come from their .kd descriptors,
    whose kernarg sizes agree with what the note said."""
    image = next(i for i in kir.open(built["libhip.so"]).images if i.kind == "code-object")
    full = tmp_path / "full.co"
    full.write_bytes(image.read())
    stripped = tmp_path / "stripped.co"
    tool("llvm-objcopy-22", "--remove-section=.note", full, stripped)
    with_note = kir.parse_code_object(full.read_bytes())
    without = kir.parse_code_object(stripped.read_bytes())
    assert sorted(k.name for k in without.kernels) == sorted(k.name for k in with_note.kernels)
    kernarg = {k.name: k.param_bytes for k in without.kernels}
    text = tool("llvm-readelf-22", "--notes", full)
    sizes = dict((n, int(s)) for s, n in re.findall(
        r"\.kernarg_segment_size:\s+(\d+)(?:\n(?!  -).*)*?\n    \.name:\s+(\S+)", text))
    assert sizes and all(kernarg[n] == s for n, s in sizes.items())
