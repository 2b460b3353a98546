// OpenMP target regions: the name clang and flang give an offloaded region's
// kernel, and kir's identity of a region across builds (docs/hashing.md,
// "OpenMP target regions").
//
// LLVM names a region `__omp_offloading_<D>_<F>_<P>_l<L>` (then `_<C>` when the
// count C of regions at that place is not 0): llvm/lib/Frontend/OpenMP/OMPIRBuilder.cpp,
// TargetRegionEntryInfo::getTargetRegionEntryFnName, D and F printed with
// `%x`. D and F are the `unsigned` truncations of the source file's
// sys::fs::UniqueID — its device (st_dev) and file (st_ino) numbers —
// (OpenMPIRBuilder::getTargetEntryUniqueInfo), P the mangled name of the
// function holding the region, L its line, C counted by
// OffloadEntriesInfoManager::registerTargetRegionEntryInfo. D and F change with
// every checkout, copy or machine: the region's identity leaves them out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kir/hash/hash.hpp"
#include "kir/support/bytes.hpp"

namespace kir {

/// The HEADER version of the region identity's domain, "kir.omp-region".
constexpr uint32_t kOmpRegionVersion = 1;

/// The parts of a region's kernel name.
struct OmpRegionName {
  uint32_t device_id = 0;  // D: st_dev of the source file (32 bits)
  uint32_t file_id = 0;    // F: st_ino of the source file (32 bits)
  std::string parent;      // P: the mangled name of the enclosing function
  uint32_t line = 0;       // L
  uint32_t count = 0;      // C: 0 when the name has no `_<C>` suffix
};

/// The parts of `name` when it is a region's kernel name (the prefix, lowercase hex
/// D and F of at most 8 digits, a non-empty P, `_l` and decimal L, optionally `_`
/// and a decimal C other than 0); nullopt otherwise.
std::optional<OmpRegionName> parse_omp_region_name(std::string_view name);

/// The name with D and F written as 0: `__omp_offloading_0_0_<P>_l<L>[_<C>]`, the
/// same in every build of one source (the NAME record of the region identity).
std::string normalized_omp_region_name(const OmpRegionName& region);

/// `code` with every `__omp_offloading_<hex>_<hex>_` in it rewritten with each
/// hex digit as '0' (the same length, so offsets in a device ELF stay): the bytes
/// two builds of one source share when the ids differ only in their digits.
std::string zero_omp_region_ids(ByteView code);

/// The region identity: XXH3-128 of HEADER("kir.omp-region", 1),
/// NAME(normalized name), CODE_KIND(code_kind), MODULE(code_digest), where
/// code_digest is XXH3-128 of the region's canonical code (docs/hashing.md).
Hash128 omp_region_identity(std::string_view normalized_name, std::string_view code_kind, const Hash128& code_digest);

/// The region identity of kernel `kernel` of a device image without IR (a cubin or
/// code object, `image_kind` its kind's name) whose decoded bytes are `image`. The
/// canonical code: for each of the ELF's sections `.text.<kernel>` then
/// `.nv.info.<kernel>` (a cubin's), its prefix, u64 size and zero_omp_region_ids of
/// its bytes; with neither, zero_omp_region_ids(image). nullopt when `kernel` is not a
/// region's name.
std::optional<Hash128> omp_region_identity_of_image(std::string_view kernel, std::string_view image_kind,
                                                    ByteView image);

}  // namespace kir
