"""Real NVIDIA libraries from PyPI wheels (downloaded once, cached under build/):
libcufft keeps thousands of fatbins in its data sections, where cuobjdump never looks
and kir does by default (issue 26: `kir inspect libcufft.so.12` said "0 containers");
libnvJitLink holds the container magic by chance, with nonsense after it."""
from __future__ import annotations

import io
import mmap
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

import kir

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "third-party"
WHEELS = {  # pinned: the facts below are about these exact files
    "libcufft.so.12": "nvidia-cufft==12.5.0.14",
    "libnvJitLink.so.13": "nvidia-nvjitlink==13.5.37",
}
MAGIC = b"\x50\xed\x55\xba"


def fetch(library: str) -> Path:
    target = CACHE / library
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    download = CACHE / "download"
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                           WHEELS[library], "-d", str(download)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot download {WHEELS[library]}: {proc.stderr.strip()[-200:]}")
    name = WHEELS[library].split("==")[0].replace("-", "_")
    wheel = next(download.glob(f"{name}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith("/" + library))
        target.write_bytes(z.read(member))
    wheel.unlink()
    return target


def cubin_arch(data: bytes) -> int:
    """The SM number a cubin's own ELF header records (e_flags, by ABI version)."""
    elf = ELFFile(io.BytesIO(data))
    assert elf["e_machine"] in ("EM_CUDA", 190)
    flags = elf["e_flags"]
    return (flags >> 8) & 0xFF if elf["e_ident"]["EI_ABIVERSION"] >= 8 else flags & 0xFF


def test_scan_finds_the_fatbins_cuobjdump_misses(cuobjdump, kir_cli):
    path = fetch("libcufft.so.12")
    proc = subprocess.run([cuobjdump, "-lelf", path], capture_output=True, text=True)
    assert "does not contain device code" in proc.stdout + proc.stderr
    assert kir.open(path, scan_data=False).images == []  # what the sections name: nothing
    binary = kir.open(path)  # the data sections searched by default
    assert len(binary.containers) > 1000
    scanned = kir.open(path, scan=True)
    assert [(c.file_offset, c.size) for c in scanned.containers if c.format == "cuda-fatbin"] == \
           [(c.file_offset, c.size) for c in binary.containers]
    for result in (kir_cli("inspect", path), kir_cli("inspect", "--require", "cubin", path)):
        assert result.returncode == 0 and f"{len(binary.containers)} containers" in result.stdout
    result = kir_cli("inspect", "--sections-only", path)
    assert result.returncode == 0 and ": elf, 0 containers" in result.stdout
    assert {c.found_by for c in binary.containers} == {"scan"}
    assert not {c.section for c in binary.containers} & {".nv_fatbin", "__nv_relfatbin"}
    kinds = {i.kind for i in binary.images}
    assert kinds <= {"cubin", "ptx", "lto-ir"}
    # Every 97th image, checked against what the image says of itself.
    checked = 0
    for image in binary.images[::97]:
        if image.kind == "cubin":
            assert cubin_arch(image.read()) == image.entry.sm
        elif image.kind == "ptx":
            target = re.search(rb"\.target\s+sm_(\d+)", image.read())
            assert target and int(target[1]) == image.entry.sm
        else:
            continue
        checked += 1
    assert checked > 50


def test_scan_rejects_chance_magic(kir_cli):
    path = fetch("libnvJitLink.so.13")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        hits, at = 0, m.find(MAGIC)
        while at != -1:
            hits, at = hits + 1, m.find(MAGIC, at + 1)
    assert hits > 0  # the magic is there by chance...
    for binary in (kir.open(path), kir.open(path, scan=True)):
        assert [c for c in binary.containers if c.format == "cuda-fatbin"] == []  # ...never reported
    result = kir_cli("inspect", "--scan", path)
    assert result.returncode == 0


def test_scan_finds_the_bitcode_libnvjitlink_carries(tmp_path):
    """libnvJitLink keeps LLVM bitcode (libdevice) as plain data; --scan finds each
    module, and LLVM's own reader accepts every one of them whole."""
    path = fetch("libnvJitLink.so.13")
    modules = [c for c in kir.open(path, scan=True).containers if c.format == "bitcode-section"]
    assert modules and {c.found_by for c in modules} == {"scan"}
    for container in modules:
        [image] = container.images
        out = tmp_path / "m.bc"
        out.write_bytes(image.read())
        proc = subprocess.run(["llvm-bcanalyzer-22", out], capture_output=True, text=True)
        assert proc.returncode == 0 and "MODULE_BLOCK" in proc.stdout
