"""Damaged inputs made from real ones, for the attack regressions and fuzz loops:
a section added to a real object (llvm-objcopy-22), a section header's type
changed, bitcode modules mutated at random (fixed seeds) and wrapped back to back
as one `.llvmbc` section, and the first mutant that crashes llvmlite's LLVM
itself (read by llvmlite directly, in a child process: the oracle, not kir)."""
from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from running import require

INTERESTING = (b"\xff\xff\xff\xff", b"\0\0\0\0", b"\x7f\xff\xff\xff", b"\x80\0\0\0")


def object_with_section(directory: Path, name: str, data: bytes) -> Path:
    """A real ELF object (clang-22) with `data` as its section `name` (llvm-objcopy-22)."""
    require("clang-22", "llvm-objcopy-22")
    (directory / "e.c").write_text("int x;\n")
    subprocess.run(["clang-22", "-c", directory / "e.c", "-o", directory / "e.o"], check=True)
    (directory / "section.bin").write_bytes(data)
    out = directory / f"with{name.replace('.', '_')}.o"
    subprocess.run(["llvm-objcopy-22", f"--add-section={name}={directory / 'section.bin'}",
                    directory / "e.o", out], check=True)
    return out


def with_section_type(path: Path, out: Path, name: str, sh_type: int) -> Path:
    """A copy of the ELF file `path` at `out` whose section `name` has type `sh_type`
    (its header's 4 bytes at sh_type changed, nothing else)."""
    from elftools.elf.elffile import ELFFile
    data = bytearray(path.read_bytes())
    with open(path, "rb") as f:
        elf = ELFFile(f)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
        header = elf["e_shoff"] + index * elf["e_shentsize"]
    data[header + 4:header + 8] = struct.pack("<I", sh_type)
    out.write_bytes(bytes(data))
    return out


def mutants(module: bytes, seed: int, count: int) -> list[bytes]:
    """`count` copies of `module`, each with 1 to 4 random edits: a bit flipped, a
    byte set, or 4 bytes set to an extreme; the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        m = bytearray(module)
        for _ in range(rng.randint(1, 4)):
            at, how = rng.randrange(len(m)), rng.random()
            if how < 0.5:
                m[at] ^= 1 << rng.randrange(8)
            elif how < 0.8:
                m[at] = rng.randrange(256)
            else:
                m[at:at + 4] = rng.choice(INTERESTING)
        out.append(bytes(m))
    return out


def wrapped(modules: list[bytes]) -> bytes:
    """Modules back to back, each behind a bitcode wrapper header (magic, version,
    offset 20, size, CPU type) and padded to 4 bytes: kir splits them by the
    headers' sizes, whatever the damage inside."""
    out = bytearray()
    for m in modules:
        out += struct.pack("<5I", 0x0B17C0DE, 0, 20, len(m), 0) + m
        out += bytes(-len(out) % 4)
    return bytes(out)


_CRASH_ORACLE = """
import resource, sys, llvmlite.binding as llvm
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
data = open(sys.argv[1], "rb").read()
at = 0
while at < len(data):
    size = int.from_bytes(data[at:at + 8], "little")
    print(at, flush=True)
    try:
        m = llvm.parse_bitcode(data[at + 8:at + 8 + size]); m.verify(); str(m)
    except Exception:
        pass
    at += 8 + size
"""


def first_crasher(candidates: list[bytes], scratch: Path) -> bytes:
    """The first candidate module llvmlite's LLVM dies reading (parse, verify, print),
    found by llvmlite itself in one child process; skips the test when none does."""
    batch = scratch / "candidates.bin"
    batch.write_bytes(b"".join(len(m).to_bytes(8, "little") + m for m in candidates))
    proc = subprocess.run([sys.executable, "-c", _CRASH_ORACLE, batch], capture_output=True, text=True)
    if proc.returncode == 0:
        pytest.skip(f"none of {len(candidates)} mutants crashes this llvmlite")
    offset = int(proc.stdout.split()[-1])
    size = int.from_bytes(batch.read_bytes()[offset:offset + 8], "little")
    return batch.read_bytes()[offset + 8:offset + 8 + size]
