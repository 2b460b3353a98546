// The `__fatBinC_Wrapper_t` layout shared by CUDA (magic 0x466243B1) and HIP
// ("HIPF"), as the discoverers read it from a file or from memory (internal).
//   0 u32 magic, 4 u32 version, 8 u64 data (the container), 16 u64 prelinked
//   (CUDA v2: a NULL-terminated array of more containers; else unused)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kir/binary.hpp"
#include "kir/discover.hpp"
#include "kir/object/elf.hpp"

namespace kir::discover {

constexpr uint64_t kWrapperSize = 24;

struct WrapperFields {
  uint32_t magic = 0, version = 0;
  uint64_t data = 0, prelinked = 0;
};

/// The fields of the wrapper at `w`; an error unless its magic is `magic`.
Expected<WrapperFields> read_wrapper(ByteView w, uint32_t magic);

/// Each wrapper of a `.nvFatBinSegment` / `.hipFatBinSegment` section, its
/// pointers resolved to file offsets (through relocations in `.o` files),
/// handed to `each` in order; the first error stops the walk. The section's
/// own errors are prefixed with `where`; errors of `each` pass as they are.
Status read_wrappers(const ElfFile& elf, const ElfSection& seg, const std::string& member, const std::string& where,
                     const std::function<Status(FatbinWrapper&)>& each);

/// The memory a registered wrapper (with magic `magic`) points to, as a view
/// of `max_size` bytes, or fewer when `readable` says so (its container's
/// headers say how many are its own).
Expected<ByteView> registered_data(const void* wrapper, uint32_t magic, uint64_t max_size,
                                   ReadableExtent readable = nullptr);

}  // namespace kir::discover
