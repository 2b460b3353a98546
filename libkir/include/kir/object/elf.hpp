// ELF64 little-endian reader: sections, program headers, symbols, relocations.
//
// Host binaries (executables, shared libraries, relocatable objects) and CUDA
// cubins are both ELF64 LE. ElfFile is a view: it validates the file header,
// section and program header tables once in create(), and decodes symbol and
// relocation tables only when asked.
//
// ELF64 header fields used (offsets into the 64-byte header):
//   0x00 e_ident[16]   "\x7fELF", class (2 = 64-bit), data (1 = LE)
//   0x10 e_type u16    1 REL, 2 EXEC, 3 DYN
//   0x12 e_machine u16 62 x86-64, 190 CUDA, 224 AMDGPU
//   0x20 e_phoff u64, 0x28 e_shoff u64, 0x30 e_flags u32,
//   0x36 e_phentsize u16 (56), 0x38 e_phnum u16,
//   0x3A e_shentsize u16 (64), 0x3C e_shnum u16, 0x3E e_shstrndx u16
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

namespace elf {
constexpr uint32_t SHT_NULL = 0, SHT_PROGBITS = 1, SHT_SYMTAB = 2, SHT_STRTAB = 3, SHT_RELA = 4, SHT_NOBITS = 8,
                   SHT_REL = 9, SHT_DYNSYM = 11;
constexpr uint64_t SHF_ALLOC = 0x2, SHF_EXECINSTR = 0x4;
constexpr uint32_t PT_LOAD = 1;
constexpr uint16_t ET_REL = 1, ET_EXEC = 2, ET_DYN = 3;
constexpr uint16_t EM_X86_64 = 62, EM_CUDA = 190, EM_AMDGPU = 224;
constexpr uint8_t STT_OBJECT = 1, STT_FUNC = 2, STT_SECTION = 3;
constexpr uint16_t SHN_UNDEF = 0, SHN_XINDEX = 0xffff;
constexpr uint32_t R_X86_64_64 = 1;
}  // namespace elf

struct ElfSection {
  uint32_t index = 0;
  std::string_view name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t addr = 0;    // virtual address when loaded (0 in .o files)
  uint64_t offset = 0;  // file offset
  uint64_t size = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t addralign = 0;
  uint64_t entsize = 0;
  ByteView data;  // the section's bytes; empty for SHT_NOBITS
};

struct ElfSegment {
  uint32_t type = 0;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
};

struct ElfSymbol {
  uint32_t index = 0;
  std::string_view name;
  uint64_t value = 0;
  uint64_t size = 0;
  uint8_t type = 0;      // STT_*
  uint8_t binding = 0;   // STB_*
  uint8_t other = 0;     // visibility and, in cubins, CUDA flags
  uint16_t section = 0;  // st_shndx
};

struct ElfRelocation {
  uint64_t offset = 0;  // in the section the relocations apply to
  uint32_t type = 0;
  uint32_t symbol = 0;
  int64_t addend = 0;
};

class ElfFile {
 public:
  /// True when `bytes` starts with the ELF magic (of any class).
  static bool is_elf(ByteView bytes) {
    return bytes.starts_with(
        "\x7f"
        "ELF");
  }

  /// Validate headers and the section and program header tables.
  static Expected<ElfFile> create(ByteView bytes);

  ByteView bytes() const { return bytes_; }
  uint16_t type() const { return type_; }
  uint16_t machine() const { return machine_; }
  uint32_t flags() const { return flags_; }

  const std::vector<ElfSection>& sections() const { return sections_; }
  const std::vector<ElfSegment>& segments() const { return segments_; }

  /// Where the ELF ends: past its header, header tables and section bytes —
  /// the size of an image known only by its address (cuModuleLoadData).
  uint64_t extent() const { return extent_; }

  /// The first section named `name`, or nullptr.
  const ElfSection* section_by_name(std::string_view name) const;

  /// `.symtab` (falling back to `.dynsym` when `dynamic`), or nullptr.
  const ElfSection* symbol_table(bool dynamic = false) const;

  /// Decode a SHT_SYMTAB or SHT_DYNSYM section.
  Expected<std::vector<ElfSymbol>> symbols(const ElfSection& table) const;

  /// The SHT_RELA section that applies to section `target`, or nullptr.
  const ElfSection* relocations_for(uint32_t target) const;

  /// Decode a SHT_RELA section.
  Expected<std::vector<ElfRelocation>> relocations(const ElfSection& rela) const;

  /// Map a virtual address range to a file offset through the PT_LOAD
  /// segments (falling back to allocated sections); nullopt when the range is
  /// not backed by file bytes.
  std::optional<uint64_t> file_offset_of(uint64_t vaddr, uint64_t size) const;

  /// The section whose file bytes hold `offset` (relative to this ELF), or nullptr.
  const ElfSection* section_at_offset(uint64_t offset) const;

 private:
  ElfFile() = default;
  Status read_sections(uint64_t shoff, uint16_t shnum, uint16_t shentsize, uint16_t shstrndx);
  Status read_segments(uint64_t phoff, uint16_t phnum, uint16_t phentsize);

  ByteView bytes_;
  uint16_t type_ = 0;
  uint16_t machine_ = 0;
  uint32_t flags_ = 0;
  std::vector<ElfSection> sections_;
  std::vector<ElfSegment> segments_;
  uint64_t extent_ = 0;
};

}  // namespace kir
