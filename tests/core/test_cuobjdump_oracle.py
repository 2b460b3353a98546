"""kir against NVIDIA's cuobjdump on every fixture: the same images, kernels,
resource usage and extracted bytes."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import kir

WITH_DEVICE_CODE = [
    "app", "app_shared_runtime", "app_compress_none", "app_compress_default",
    "app_compress_size", "app_compress_speed", "app_compress_balance", "app_compress_all",
    "app_rdc", "libkernels.so", "kernels.o", "kernels_dc.o", "librdc.a", "kernels.fatbin",
    "clang_cuda_old.o",
]

LISTING = re.compile(r"^(ELF|PTX) file\s+(\d+): (\S+)\.(\d+)\.(sm_\w+)\.(cubin|ptx)$")


def cuobjdump_out(cuobjdump: str, *args) -> str:
    proc = subprocess.run([cuobjdump, *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def cuobjdump_images(cuobjdump: str, path: Path) -> list[tuple[str, str]]:
    """(kind, arch) of every image, in file order, from `cuobjdump -all -lelf -lptx`."""
    # cuobjdump lists ELF then PTX per container; its numbering is per kind.
    images = []
    for line in cuobjdump_out(cuobjdump, "-all", "-lelf", "-lptx", path).splitlines():
        m = LISTING.match(line.strip())
        if m:
            images.append(("cubin" if m[1] == "ELF" else "ptx", m[5], int(m[2])))
    return images


def cuobjdump_blocks(text: str) -> list[dict]:
    """Split -symbols / -res-usage output into per-image blocks."""
    blocks = []
    for line in text.splitlines():
        if line.startswith("Fatbin elf code") or line.startswith("Fatbin ptx code"):
            blocks.append({"kind": "cubin" if "elf" in line else "ptx", "lines": []})
        elif blocks:
            blocks[-1]["lines"].append(line)
    for b in blocks:
        b["arch"] = next(l.split("=")[1].strip() for l in b["lines"] if l.startswith("arch ="))
    return blocks


@pytest.mark.parametrize("name", WITH_DEVICE_CODE)
def test_same_images_as_cuobjdump(built, cuobjdump, name):
    ours = kir.open(built[name])
    theirs = cuobjdump_images(cuobjdump, built[name])
    mine = [(i.kind, i.arch) for i in ours.images if i.kind in ("cubin", "ptx")]
    assert sorted(mine) == sorted((k, a) for k, a, _ in theirs)
    # Per kind, file order matches cuobjdump's numbering.
    for kind in ("cubin", "ptx"):
        assert [a for k, a in mine if k == kind] == [a for k, a, _ in theirs if k == kind]
    assert len(theirs) > 0


@pytest.mark.parametrize("name", WITH_DEVICE_CODE)
def test_same_kernels_as_cuobjdump(built, cuobjdump, name):
    blocks = [b for b in cuobjdump_blocks(cuobjdump_out(cuobjdump, "-all", "-symbols", built[name]))
              if b["kind"] == "cubin"]
    cubins = [i for i in kir.open(built[name]).images if i.kind == "cubin"]
    assert len(blocks) == len(cubins)
    for block, image in zip(blocks, cubins):
        assert block["arch"] == image.arch
        entries = {l.split()[-1] for l in block["lines"] if " ENTRY " in f" {l} " and l.startswith("FUNC")}
        assert {k.name for k in image.kernels} == entries


@pytest.mark.parametrize("name", ["app", "kernels_dc.o", "librdc.a", "app_compress_all"])
def test_registers_and_shared_memory_match_res_usage(built, cuobjdump, name):
    text = cuobjdump_out(cuobjdump, "-all", "-res-usage", built[name])
    blocks = [b for b in cuobjdump_blocks(text) if b["kind"] == "cubin"]
    cubins = [i for i in kir.open(built[name]).images if i.kind == "cubin"]
    assert len(blocks) == len(cubins)
    checked = 0
    for block, image in zip(blocks, cubins):
        usage = {}
        lines = block["lines"]
        for a, b in zip(lines, lines[1:]):
            m = re.match(r"\s*Function (\S+):", a)
            if m:
                usage[m[1]] = dict(re.findall(r"(\w+):(\d+)", b))
        for k in image.kernels:
            assert int(usage[k.name]["REG"]) == k.registers, k.name
            assert int(usage[k.name]["SHARED"]) == k.shared_bytes, k.name
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", WITH_DEVICE_CODE)
def test_extract_is_byte_identical(built, cuobjdump, kir_cli, tmp_path, name):
    theirs = tmp_path / "cuobjdump"
    theirs.mkdir()
    subprocess.run([cuobjdump, "-all", "-xelf", "all", "-xptx", "all", built[name]],
                   cwd=theirs, check=True, capture_output=True)
    ours = tmp_path / "kir"
    result = kir_cli("extract", built[name], "-o", ours, "--kind", "cubin,ptx")
    assert result.returncode == 0, result.stderr
    expected = sorted(p.name for p in theirs.iterdir())
    produced = {p.name: p for p in ours.iterdir()}
    assert sorted(produced) == expected
    for file in expected:
        assert produced[file].read_bytes() == (theirs / file).read_bytes(), file


@pytest.mark.parametrize("name, copy", [("libkernels.so", "libkernels.so.1.2"), ("app", "my.app.x")])
def test_extract_names_a_versioned_soname_as_cuobjdump_does(built, cuobjdump, kir_cli, tmp_path, name, copy):
    """cuobjdump names what it extracts after the file name up to its last dot
    (libcublasLt.so.13 -> libcublasLt.so.1.sm_75.cubin); kir cut at the first (issue 26)."""
    path = tmp_path / copy
    shutil.copy(built[name], path)
    theirs, ours = tmp_path / "cuobjdump", tmp_path / "kir"
    theirs.mkdir()
    subprocess.run([cuobjdump, "-all", "-xelf", "all", "-xptx", "all", path], cwd=theirs, check=True,
                   capture_output=True)
    assert kir_cli("extract", path, "-o", ours, "--kind", "cubin,ptx").returncode == 0
    expected = sorted(p.name for p in theirs.iterdir())
    assert expected and all(n.startswith(copy.rpartition(".")[0] + ".") for n in expected)
    assert sorted(p.name for p in ours.iterdir()) == expected


def test_no_device_code(built, kir_cli):
    result = kir_cli("inspect", "--json", built["host_only"])
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["images"] == [] and report["containers"] == []


def test_a_bare_cubin_file_is_one_image(built, cuobjdump, kir_cli, tmp_path):
    """`nvcc -cubin` output: the file is the image (container format device-elf)."""
    path = built["kernels_sm90.cubin"]
    binary = kir.open(path)
    assert [c.format for c in binary.containers] == ["device-elf"]
    (image,) = binary.images
    listed = [l.split()[-1] for l in cuobjdump_out(cuobjdump, "-all", "-lelf", path).splitlines()
              if l.startswith("ELF file")]
    assert [f"{path.stem}.{image.arch}.cubin"] == listed
    symbols = cuobjdump_out(cuobjdump, "-all", "-symbols", path).splitlines()
    entries = {l.split()[-1] for l in symbols if l.startswith("FUNC") and " ENTRY " in f" {l} "}
    assert {k.name for k in image.kernels} == entries and entries
    result = kir_cli("extract", path, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    (extracted,) = tmp_path.iterdir()
    assert extracted.read_bytes() == path.read_bytes()


def test_an_extracted_code_object_reads_as_it_did_in_its_bundle(built, kir_cli, tmp_path):
    bundled = [i for i in kir.open(built["hip.o"]).images if i.kind == "code-object"]
    assert kir_cli("extract", built["hip.o"], "-o", tmp_path, "--kind", "code-object").returncode == 0
    files = sorted(tmp_path.iterdir())
    assert len(files) == len(bundled) > 0
    for file, original in zip(files, bundled):
        (image,) = kir.open(file).images
        assert (image.kind, image.target, image.triple) == (original.kind, original.target, original.triple)
        assert [k.name for k in image.kernels] == [k.name for k in original.kernels]
