#include "kir/object/elf.hpp"

#include <algorithm>

#include <string>

namespace kir {

namespace {

constexpr uint64_t kHeaderSize = 64;
constexpr uint64_t kSectionHeaderSize = 64;
constexpr uint64_t kProgramHeaderSize = 56;
constexpr uint64_t kSymbolSize = 24;
constexpr uint64_t kRelaSize = 24;

std::string section_label(const ElfSection& s) {
  return "section [index " + std::to_string(s.index) + "] '" + std::string(s.name) + "'";
}

}  // namespace

Expected<ElfFile> ElfFile::create(ByteView bytes) {
  if (!is_elf(bytes))
    return Error(ErrorCode::bad_magic, "not an ELF file (no \\x7fELF magic at offset 0x0)", bytes.origin(0));
  if (bytes.size() < kHeaderSize)
    return Error(ErrorCode::truncated,
                 "ELF header truncated: file has " + hex(bytes.size()) + " bytes, the header needs 0x40",
                 bytes.origin(bytes.size()));
  uint8_t elf_class = bytes.data()[4], data = bytes.data()[5];
  if (elf_class != 2)
    return Error(ErrorCode::unsupported,
                 "unsupported ELF class " + std::to_string(elf_class) + " at offset 0x4: expected 2 (ELF64)",
                 bytes.origin(4));
  if (data != 1)
    return Error(ErrorCode::unsupported,
                 "unsupported ELF data encoding " + std::to_string(data) + " at offset 0x5: expected 1 (little-endian)",
                 bytes.origin(5));

  ElfFile f;
  f.bytes_ = bytes;
  f.extent_ = kHeaderSize;
  f.type_ = bytes.read<uint16_t>(0x10);
  f.machine_ = bytes.read<uint16_t>(0x12);
  f.flags_ = bytes.read<uint32_t>(0x30);
  if (Status s = f.read_sections(bytes.read<uint64_t>(0x28), bytes.read<uint16_t>(0x3C), bytes.read<uint16_t>(0x3A),
                                 bytes.read<uint16_t>(0x3E));
      !s)
    return s.error();
  if (Status s = f.read_segments(bytes.read<uint64_t>(0x20), bytes.read<uint16_t>(0x38), bytes.read<uint16_t>(0x36));
      !s)
    return s.error();
  return f;
}

Status ElfFile::read_sections(uint64_t shoff, uint16_t shnum16, uint16_t shentsize, uint16_t shstrndx16) {
  if (shoff == 0) return {};  // no section header table
  if (shentsize != kSectionHeaderSize)
    return Error(ErrorCode::malformed,
                 "ELF header has invalid e_shentsize at offset 0x3a: expected 64, got " + std::to_string(shentsize),
                 bytes_.origin(0x3a));
  if (!bytes_.contains(shoff, kSectionHeaderSize))
    return Error(ErrorCode::out_of_bounds,
                 "section header table at offset " + hex(shoff) + " lies past the end of the file (size " +
                     hex(bytes_.size()) + ")",
                 bytes_.origin(shoff));
  // Extended numbering: the real counts live in section 0.
  uint64_t shnum = shnum16 ? shnum16 : bytes_.read<uint64_t>(shoff + 0x20);
  uint32_t shstrndx = shstrndx16 == elf::SHN_XINDEX ? bytes_.read<uint32_t>(shoff + 0x28) : shstrndx16;
  if (shnum > (bytes_.size() - shoff) / kSectionHeaderSize)
    return Error(ErrorCode::out_of_bounds,
                 "section header table at offset " + hex(shoff) + " with " + std::to_string(shnum) +
                     " entries runs past the end of the file (size " + hex(bytes_.size()) + ")",
                 bytes_.origin(shoff));
  sections_.resize(shnum);
  extent_ = std::max(extent_, shoff + shnum * kSectionHeaderSize);
  for (uint64_t i = 0; i < shnum; ++i) {
    uint64_t h = shoff + i * kSectionHeaderSize;
    ElfSection& s = sections_[i];
    s.index = static_cast<uint32_t>(i);
    s.type = bytes_.read<uint32_t>(h + 0x04);
    s.flags = bytes_.read<uint64_t>(h + 0x08);
    s.addr = bytes_.read<uint64_t>(h + 0x10);
    s.offset = bytes_.read<uint64_t>(h + 0x18);
    s.size = bytes_.read<uint64_t>(h + 0x20);
    s.link = bytes_.read<uint32_t>(h + 0x28);
    s.info = bytes_.read<uint32_t>(h + 0x2C);
    s.addralign = bytes_.read<uint64_t>(h + 0x30);
    s.entsize = bytes_.read<uint64_t>(h + 0x38);
    if (s.type == elf::SHT_NOBITS || s.type == elf::SHT_NULL) continue;
    if (!bytes_.contains(s.offset, s.size))
      return Error(ErrorCode::out_of_bounds,
                   "section [index " + std::to_string(i) + "] at offset " + hex(s.offset) + " (size " + hex(s.size) +
                       ") runs past the end of the file (size " + hex(bytes_.size()) + ")",
                   bytes_.origin(s.offset));
    s.data = bytes_.sub(s.offset, s.size);
    extent_ = std::max(extent_, s.offset + s.size);
  }
  if (shnum == 0) return {};
  if (shstrndx >= shnum)
    return Error(ErrorCode::malformed,
                 "ELF header names section " + std::to_string(shstrndx) +
                     " as the section name table, but there are only " + std::to_string(shnum) + " sections",
                 bytes_.origin(0x3e));
  ByteView names = sections_[shstrndx].data;
  for (ElfSection& s : sections_) {
    uint32_t name_off = bytes_.read<uint32_t>(shoff + s.index * kSectionHeaderSize);
    if (name_off != 0 && name_off >= names.size())
      return Error(ErrorCode::out_of_bounds, "section [index " + std::to_string(s.index) + "] has name offset " +
                                                 hex(name_off) + " past the end of the name table (size " +
                                                 hex(names.size()) + ")");
    s.name = names.c_string(name_off);
  }
  return {};
}

Status ElfFile::read_segments(uint64_t phoff, uint16_t phnum, uint16_t phentsize) {
  if (phoff == 0 || phnum == 0) return {};
  if (phentsize != kProgramHeaderSize)
    return Error(ErrorCode::malformed,
                 "ELF header has invalid e_phentsize at offset 0x36: expected 56, got " + std::to_string(phentsize),
                 bytes_.origin(0x36));
  if (!bytes_.contains(phoff, uint64_t(phnum) * kProgramHeaderSize))
    return Error(ErrorCode::out_of_bounds,
                 "program header table at offset " + hex(phoff) + " with " + std::to_string(phnum) +
                     " entries runs past the end of the file (size " + hex(bytes_.size()) + ")",
                 bytes_.origin(phoff));
  segments_.resize(phnum);
  extent_ = std::max(extent_, phoff + uint64_t(phnum) * kProgramHeaderSize);
  for (uint32_t i = 0; i < phnum; ++i) {
    uint64_t h = phoff + i * kProgramHeaderSize;
    ElfSegment& p = segments_[i];
    p.type = bytes_.read<uint32_t>(h);
    p.flags = bytes_.read<uint32_t>(h + 0x04);
    p.offset = bytes_.read<uint64_t>(h + 0x08);
    p.vaddr = bytes_.read<uint64_t>(h + 0x10);
    p.filesz = bytes_.read<uint64_t>(h + 0x20);
    p.memsz = bytes_.read<uint64_t>(h + 0x28);
  }
  return {};
}

const ElfSection* ElfFile::section_by_name(std::string_view name) const {
  for (const ElfSection& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

const ElfSection* ElfFile::symbol_table(bool dynamic) const {
  for (const ElfSection& s : sections_)
    if (s.type == (dynamic ? elf::SHT_DYNSYM : elf::SHT_SYMTAB)) return &s;
  return nullptr;
}

Expected<std::vector<ElfSymbol>> ElfFile::symbols(const ElfSection& table) const {
  if (table.entsize != kSymbolSize)
    return Error(ErrorCode::malformed,
                 section_label(table) + " has invalid sh_entsize: expected 24, got " + std::to_string(table.entsize));
  if (table.link >= sections_.size())
    return Error(ErrorCode::malformed, section_label(table) + " links to string table [index " +
                                           std::to_string(table.link) + "], which does not exist");
  ByteView names = sections_[table.link].data;
  ByteView data = table.data;
  uint64_t count = data.size() / kSymbolSize;
  std::vector<ElfSymbol> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t e = i * kSymbolSize;
    ElfSymbol& sym = out[i];
    uint32_t name_off = data.read<uint32_t>(e);
    if (name_off != 0 && name_off >= names.size())
      return Error(ErrorCode::out_of_bounds, section_label(table) + ": symbol " + std::to_string(i) +
                                                 " has name offset " + hex(name_off) +
                                                 " past the end of its string table");
    sym.index = static_cast<uint32_t>(i);
    sym.name = names.c_string(name_off);
    uint8_t info = data.read<uint8_t>(e + 4);
    sym.type = info & 0xf;
    sym.binding = info >> 4;
    sym.other = data.read<uint8_t>(e + 5);
    sym.section = data.read<uint16_t>(e + 6);
    sym.value = data.read<uint64_t>(e + 8);
    sym.size = data.read<uint64_t>(e + 16);
  }
  return out;
}

const ElfSection* ElfFile::relocations_for(uint32_t target) const {
  for (const ElfSection& s : sections_)
    if (s.type == elf::SHT_RELA && s.info == target) return &s;
  return nullptr;
}

Expected<std::vector<ElfRelocation>> ElfFile::relocations(const ElfSection& rela) const {
  if (rela.entsize != kRelaSize)
    return Error(ErrorCode::malformed,
                 section_label(rela) + " has invalid sh_entsize: expected 24, got " + std::to_string(rela.entsize));
  uint64_t count = rela.data.size() / kRelaSize;
  std::vector<ElfRelocation> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t e = i * kRelaSize;
    uint64_t info = rela.data.read<uint64_t>(e + 8);
    out[i] = {rela.data.read<uint64_t>(e), static_cast<uint32_t>(info & 0xffffffff), static_cast<uint32_t>(info >> 32),
              rela.data.read<int64_t>(e + 16)};
  }
  return out;
}

std::optional<uint64_t> ElfFile::file_offset_of(uint64_t vaddr, uint64_t size) const {
  for (const ElfSegment& p : segments_) {
    if (p.type != elf::PT_LOAD || vaddr < p.vaddr) continue;
    uint64_t rel = vaddr - p.vaddr;
    // The segment's claim is checked against the file too: headers are input.
    if (rel <= p.filesz && size <= p.filesz - rel && p.offset <= bytes_.size() && rel <= bytes_.size() - p.offset &&
        bytes_.contains(p.offset + rel, size))
      return p.offset + rel;
  }
  for (const ElfSection& s : sections_) {
    if (s.addr == 0 || s.type == elf::SHT_NOBITS || vaddr < s.addr) continue;
    uint64_t rel = vaddr - s.addr;
    if (rel <= s.size && size <= s.size - rel && s.data.contains(rel, size)) return s.offset + rel;
  }
  return std::nullopt;
}

const ElfSection* ElfFile::section_at_offset(uint64_t offset) const {
  for (const ElfSection& s : sections_) {
    if (s.type == elf::SHT_NOBITS || s.type == elf::SHT_NULL || s.size == 0) continue;
    if (offset >= s.offset && offset - s.offset < s.size) return &s;
  }
  return nullptr;
}

}  // namespace kir
