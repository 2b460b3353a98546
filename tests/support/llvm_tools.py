"""LLVM's own tools as oracles (clang-22's LLVM): run one, read an ELF section, the
images `llvm-objdump --offloading` describes, the kernels `llvm-readelf --notes` and
`llvm-dis` list."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from elftools.elf.elffile import ELFFile

from running import require


def tool(*args, cwd=None) -> str:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, f"{args}: {proc.stderr}"
    return proc.stdout


def section_bytes(path: Path, name: str) -> bytes:
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(name).data()


def objdump_offloading(path: Path, tmp_path: Path) -> tuple[list[dict], list[Path]]:
    """`llvm-objdump --offloading`: the images it describes and the files it extracts."""
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    text = tool("llvm-objdump-22", "--offloading", copy.name, cwd=tmp_path)
    images = []
    for block in text.split("OFFLOADING IMAGE")[1:]:
        images.append(dict(re.findall(r"^(\w+)\s+(.+)$", block, re.M)))
    return images, sorted(p for p in tmp_path.iterdir() if p.name.startswith(copy.name + "."))


def readelf_kernels(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Kernel name -> explicit (offset, size) args, from `llvm-readelf --notes`."""
    text = tool("llvm-readelf-22", "--notes", path)
    kernels = {}
    for block in text.split("  - .agpr_count")[1:]:
        name = re.search(r"^    \.name:\s+(\S+)", block, re.M)[1]
        args = re.findall(r"\.offset:\s+(\d+)\n\s+\.size:\s+(\d+)\n\s+\.value_kind:\s+(\w+)", block)
        kernels[name] = [(int(o), int(s)) for o, s, kind in args if not kind.startswith("hidden_")]
    return kernels


def llvm_dis(data: bytes, tmp_path: Path) -> str:
    require("llvm-dis-22")
    path = tmp_path / "m.bc"
    path.write_bytes(data)
    return subprocess.run(["llvm-dis-22", path, "-o", "-"], capture_output=True, text=True,
                          check=True).stdout


def dis_kernels(text: str) -> set[str]:
    return set(re.findall(r"^define .*(?:amdgpu_kernel|ptx_kernel) .*@([\w.$]+)\(", text, re.M))
