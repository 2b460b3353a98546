"""OpenMP offload read offline (issue 27, item 1): a bare LLVM bitcode file opens as one IR
module; the images clang-22 and flang-22 put in `.llvm.offloading` — NVPTX and AMDGPU,
LTO (LLVM IR) and not (a device ELF) — built at test time (tests/support/openmp_build.py)
and checked against LLVM's and NVIDIA's own tools: llvm-objdump --offloading,
clang-offload-packager (the image bytes), llvm-dis (the IR's kernels), cuobjdump (a
cubin's) and llvm-readelf (a code object's)."""
from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import pytest

import kir
from llvm_tools import dis_kernels, llvm_dis, objdump_offloading
from openmp_build import clang_object, flang_device_bitcode, flang_ir_object, flang_object, packaged_image
from running import require


def inspect_json(kir_cli, path: Path) -> dict:
    result = kir_cli("inspect", "--ir", "--kernels", "--json", path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def ir_kernels(report: dict) -> set[str]:
    return {f["name"] for m in report["ir_modules"] for f in m["functions"] if f["kernel"] and not f["declaration"]}


# --- a bare bitcode file ----------------------------------------------------------------

@pytest.fixture(scope="module")
def device_bitcode(tmp_path_factory) -> Path:
    """flang-22's device module of offload.f90, as `--offload-device-only -emit-llvm` writes it."""
    return flang_device_bitcode(tmp_path_factory.mktemp("bare"), "sm_90")


def test_bare_bitcode_opens_as_one_ir_module(device_bitcode, kir_cli, tmp_path):
    """The file the issue saw refused (`not an ELF file, ... (first bytes: 42 43 c0 de)`)."""
    data = device_bitcode.read_bytes()
    assert data[:4] == b"BC\xc0\xde"
    binary = kir.open(device_bitcode)
    assert binary.format == "bitcode"
    [container] = binary.containers
    [image] = container.images
    assert image.kind == "bitcode" and image.read() == data
    report = inspect_json(kir_cli, device_bitcode)
    assert [m["size"] for m in report["ir_modules"]] == [len(data)]
    assert ir_kernels(report) == dis_kernels(llvm_dis(data, tmp_path)) != set()
    table = kir_cli("inspect", "--ir", "--kernels", device_bitcode)
    assert table.returncode == 0 and "IR modules: 1" in table.stdout


def test_wrapped_bitcode_opens_as_its_module(device_bitcode, kir_cli, tmp_path):
    """The bitcode wrapper (DE C0 17 0B, version, offset, size, cputype), which llvm-dis reads too."""
    module = device_bitcode.read_bytes()
    wrapped = tmp_path / "wrapped.bc"
    wrapped.write_bytes(struct.pack("<5I", 0x0B17C0DE, 0, 20, len(module), 0) + module)
    [image] = kir.open(wrapped).images
    assert image.read() == module
    require("llvm-dis-22")
    dis = subprocess.run(["llvm-dis-22", wrapped, "-o", "-"], capture_output=True, text=True, check=True).stdout
    assert ir_kernels(inspect_json(kir_cli, wrapped)) == dis_kernels(dis) != set()


def bitcode_error(kir_cli, path: Path) -> str:
    result = kir_cli("inspect", path)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_truncated_bitcode_is_a_precise_error(device_bitcode, kir_cli, tmp_path):
    """Cut anywhere past the magic: one line, naming the bitcode file and a byte offset."""
    data = device_bitcode.read_bytes()
    for cut in sorted({5, 6, 8, 9, 12, 20, 64, len(data) // 2, len(data) - 5, len(data) - 1}):
        bad = tmp_path / f"cut{cut}.bc"
        bad.write_bytes(data[:cut])
        line = bitcode_error(kir_cli, bad)
        assert "bitcode file" in line and re.search(r"offset 0x[0-9a-f]+", line), (cut, line)
        with pytest.raises(kir.KirError):
            kir.open(bad)


@pytest.mark.parametrize("data,phrase", [
    (b"BC\xc0\xde", "has no module block"),
    (b"BC\xc0\xde" + bytes(12), "has no module block"),
    (struct.pack("<5I", 0x0B17C0DE, 0, 20, 4, 0), "points past the data"),
    (struct.pack("<5I", 0x0B17C0DE, 0, 8, 64, 0), "points into its own 20-byte header"),
    (struct.pack("<3I", 0x0B17C0DE, 0, 20), "wrapper header at offset 0x0 is truncated"),
    (b"BC\xc0\xde\xff\xff\xff\xff", "expected a block at offset 0x4"),
])
def test_bad_bitcode_is_a_precise_error(kir_cli, tmp_path, data, phrase):
    bad = tmp_path / "bad.bc"
    bad.write_bytes(data)
    line = bitcode_error(kir_cli, bad)
    assert line.startswith("kir: error:") and "bitcode" in line and phrase in line, line


# --- OpenMP images in .llvm.offloading ------------------------------------------------------

# (name, builder, arch, image kind kir reports). For AMDGPU, clang 22 and flang 22 put LLVM IR
# in the object with or without -foffload-lto (-fno-offload-lto too): no code object.
BUILDS = {
    "clang_sm90": (lambda d: clang_object(d, "sm_90", lto=False), "sm_90", "cubin"),
    "clang_sm90_lto": (lambda d: clang_object(d, "sm_90", lto=True), "sm_90", "bitcode"),
    "clang_gfx90a": (lambda d: clang_object(d, "gfx90a", lto=False), "gfx90a", "bitcode"),
    "clang_gfx90a_lto": (lambda d: clang_object(d, "gfx90a", lto=True), "gfx90a", "bitcode"),
    "flang_sm90": (lambda d: flang_object(d, "sm_90"), "sm_90", "cubin"),
    "flang_gfx90a": (lambda d: flang_object(d, "gfx90a"), "gfx90a", "bitcode"),
    "flang_sm90_ir": (lambda d: flang_ir_object(d, "sm_90"), "sm_90", "bitcode"),
    "flang_gfx90a_ir": (lambda d: flang_ir_object(d, "gfx90a"), "gfx90a", "bitcode"),
}


def oracle_kernels(kind: str, image_file: Path, cuobjdump: str, tmp_path: Path) -> set[str]:
    """The image's kernels as another tool lists them: llvm-dis (IR), cuobjdump (a cubin)."""
    if kind == "bitcode":
        return dis_kernels(llvm_dis(image_file.read_bytes(), tmp_path))
    sass = subprocess.run([cuobjdump, "-sass", image_file], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"Function : (\S+)", sass))


@pytest.mark.parametrize("name", list(BUILDS))
def test_openmp_images_match_llvm_and_nvidia_tools(name, kir_cli, cuobjdump, tmp_path):
    build, arch, kind = BUILDS[name]
    obj = build(tmp_path / "build")
    theirs, _ = objdump_offloading(obj, tmp_path)
    images = [i for c in kir.open(obj).containers if c.format == "offload-binary" for i in c.images]
    assert len(images) == len(theirs) == 1
    [ours], [t] = images, theirs
    assert (ours.target, ours.triple, ours.identifier) == (t["arch"], t["triple"], t["producer"]) == \
        (arch, ours.triple, "openmp")
    assert ours.kind == kind and t["kind"] == ("llvm ir" if kind == "bitcode" else "elf")
    image_file = tmp_path / f"image.{kind}"
    assert ours.read() == packaged_image(obj, arch, image_file)
    expected = oracle_kernels(kind, image_file, cuobjdump, tmp_path)
    assert expected and all(k.startswith("__omp_offloading_") for k in expected)
    if kind == "bitcode":
        assert ir_kernels(inspect_json(kir_cli, obj)) == expected
    else:
        assert {k.name for k in ours.kernels} == expected


def test_flang_lto_flags_keep_no_device_ir(tmp_path):
    """What docs/openmp.md says of flang-22: no -foffload-lto, and -flto leaves the device
    image a device ELF (the host object becomes bitcode)."""
    require("flang-22")
    obj = flang_object(tmp_path, "sm_90")  # the source, copied
    refused = subprocess.run(["flang-22", "-fopenmp", "--offload-arch=sm_90", "-foffload-lto", "-c", "offload.f90",
                              "-o", "x.o"], capture_output=True, text=True, cwd=tmp_path)
    assert refused.returncode != 0 and "unknown argument: '-foffload-lto'" in refused.stderr
    subprocess.run(["flang-22", "-fopenmp", "--offload-arch=sm_90", "-flto", "-ffat-lto-objects", "-c",
                    "offload.f90", "-o", "fat.o"], check=True, capture_output=True, cwd=tmp_path)
    for path in (obj, tmp_path / "fat.o"):
        offloaded = [i for c in kir.open(path).containers if c.format == "offload-binary" for i in c.images]
        assert [i.kind for i in offloaded] == ["cubin"]
