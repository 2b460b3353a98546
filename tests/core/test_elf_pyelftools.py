"""kir's ELF reader and wrapper decoding against pyelftools, an independent reader."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

import kir
from kir import _core

HOST_FILES = ["app", "app_rdc", "libkernels.so", "kernels.o", "kernels_dc.o", "host_only"]


@pytest.mark.parametrize("name", HOST_FILES)
def test_sections_match(built, name):
    ours = _core.ElfFile.open(str(built[name])).sections()
    with open(built[name], "rb") as f:
        elf = ELFFile(f)
        theirs = [(i, s.name, s["sh_type"], s["sh_flags"], s["sh_addr"], s["sh_offset"],
                   s["sh_size"], s["sh_link"], s["sh_info"], s["sh_addralign"], s["sh_entsize"])
                  for i, s in enumerate(elf.iter_sections())]
    # pyelftools names types (SHT_PROGBITS); compare the numbers through its enum.
    from elftools.elf.enums import ENUM_SH_TYPE_AMD64, ENUM_SH_TYPE_BASE
    names = {**ENUM_SH_TYPE_BASE, **ENUM_SH_TYPE_AMD64}
    theirs = [(i, n, names[t] if isinstance(t, str) else t, *rest) for i, n, t, *rest in theirs]
    assert ours == theirs


@pytest.mark.parametrize("name", HOST_FILES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_symbols_match(built, name, dynamic):
    ours = _core.ElfFile.open(str(built[name])).symbols(dynamic)
    with open(built[name], "rb") as f:
        elf = ELFFile(f)
        table = elf.get_section_by_name(".dynsym" if dynamic else ".symtab")
        theirs = [] if table is None else [
            (s.name, s["st_value"], s["st_size"], s.entry["st_info"]["type"],
             s.entry["st_info"]["bind"], s["st_shndx"]) for s in table.iter_symbols()]
    assert len(ours) == len(theirs)
    for (name_, value, size, _type, _bind, _other, shndx), t in zip(ours, theirs):
        assert (name_, value, size) == t[:3]
        if isinstance(t[5], int):
            assert shndx == t[5]


def test_cubin_sections_match(built, tmp_path):
    """The reader also handles the cubins inside (EM_CUDA)."""
    for image in kir.open(built["app"]).images:
        if image.kind != "cubin":
            continue
        path = tmp_path / "x.cubin"
        path.write_bytes(image.read())
        ours = [s[1] for s in _core.ElfFile.open(str(path)).sections()]
        with open(path, "rb") as f:
            elf = ELFFile(f)
            assert elf["e_machine"] in ("EM_CUDA", 190)
            assert ours == [s.name for s in elf.iter_sections()]


def wrapper_targets(path: Path) -> list[int]:
    """File offsets of the containers the .nvFatBinSegment wrappers point to, decoded
    independently with pyelftools (segments for executables, relocations for .o)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        seg = elf.get_section_by_name(".nvFatBinSegment")
        data = seg.data()
        targets = []
        if elf["e_type"] == "ET_REL":
            rela = next(s for s in elf.iter_sections()
                        if isinstance(s, RelocationSection) and s["sh_info"] == elf.get_section_index(".nvFatBinSegment"))
            symtab = elf.get_section(rela["sh_link"])
            for r in rela.iter_relocations():
                if r["r_offset"] % 24 == 8:
                    sym = symtab.get_symbol(r["r_info_sym"])
                    target = elf.get_section(sym["st_shndx"])
                    targets.append(target["sh_offset"] + sym["st_value"] + r["r_addend"])
            return sorted(targets)
        for off in range(0, len(data), 24):
            magic, version, ptr = struct.unpack_from("<IIQ", data, off)
            assert magic == 0x466243B1
            for file_off in elf.address_offsets(ptr, 16):
                targets.append(file_off)
        return sorted(targets)


@pytest.mark.parametrize("name", ["app", "app_rdc", "libkernels.so", "kernels.o", "kernels_dc.o"])
def test_wrappers_point_at_the_containers(built, name):
    b = kir.open(built[name])
    ours = sorted(w.container_offset for w in b.wrappers)
    assert ours == wrapper_targets(built[name])
    # Every wrapper's container is one kir found, and every container has its wrapper.
    offsets = {c.file_offset for c in b.containers}
    assert set(ours) <= offsets
    assert all(c.site.wrapper is not None for c in b.containers)


def test_archive_members(built):
    b = kir.open(built["librdc.a"])
    assert b.format == "archive"
    assert b.members == ["rdc_a.o", "rdc_b.o"]
    assert [c.member for c in b.containers] == ["rdc_a.o", "rdc_b.o"]


@pytest.mark.parametrize("name", ["kernels_sm90.cubin"])
def test_sections_of_bytes_match(built, name):
    """kir.binary.elf_sections: kir's reader over an image in memory (as `kir diff`
    reads a decoded cubin's `.text.KERNEL` sections), against pyelftools."""
    from io import BytesIO

    from elftools.elf.enums import ENUM_SH_TYPE_BASE
    data = built[name].read_bytes()
    ours = kir.binary.elf_sections(data)
    elf = ELFFile(BytesIO(data))
    theirs = [(i, s.name, ENUM_SH_TYPE_BASE.get(s["sh_type"], s["sh_type"]), s["sh_flags"], s["sh_addr"],
               s["sh_offset"], s["sh_size"], s["sh_link"], s["sh_info"], s["sh_addralign"], s["sh_entsize"])
              for i, s in enumerate(elf.iter_sections())]
    assert ours == theirs and any(s[1].startswith(".text.") for s in ours)
    with pytest.raises(kir.KirError):
        kir.binary.elf_sections(data[:100])
