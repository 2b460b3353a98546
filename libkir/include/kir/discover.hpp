// Discoverers: one per container format, each turning the bytes of one
// container into the ContainerSite/Image model of kir/binary.hpp.
//
// Every discoverer reads a ByteView that starts at the container and may run
// past it (the container's own headers say where it ends), so the same code
// serves two callers:
//   - Binary::open, over a mapped file: the view's origin is the file offset,
//     and Binary places the site (archive member, section, how it was found);
//   - the hook layer, over memory a GPU runtime was handed at registration: a
//     bare address (the `*_registered_*` entry points below), whose size only
//     the headers tell; offsets are then from the container's first byte.
//
// Formats (libkir/core/discover/):
//   cuda_fatbin.cpp     CUDA fatbin containers, `__fatBinC_Wrapper_t` wrappers
//   offload_bundle.cpp  clang offload bundles, plain and compressed (CCOB),
//                       HIP's wrapper, `--type=o` object bundles
//   offload_binary.cpp  LLVM offloading binaries
//   bitcode.cpp         LLVM bitcode: embedded (.llvmbc, .llvm.lto, scanned modules)
//                       or a bare bitcode file
//   device_elf.cpp      a cubin or AMDGPU code object that is one image; bare
//                       images handed to the driver (ELF, fatbin, PTX)
//   scan.hpp            the magic scan (find_magic), shared by every format
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kir/binary.hpp"

namespace kir {

class ElfFile;

/// What a discoverer is told about the container it reads.
struct DiscoverOptions {
  /// Scanning (the bytes were found by magic, not by a section or wrapper):
  /// reject anything not plainly a container (unknown fatbin entry kinds,
  /// bundle ids without a triple, bitcode without a module block).
  bool strict = false;
};

/// The site of a container at `at`: format, version, size, compression,
/// images; file_offset is at.origin(). The caller sets member, section and
/// found_by.
Expected<ContainerSite> discover_fatbin(ByteView at, DiscoverOptions options = {});
Expected<ContainerSite> discover_bundle(ByteView at, DiscoverOptions options = {});
Expected<ContainerSite> discover_offload_binary(ByteView at);
/// The modules of a `.llvmbc` / `.llvm.lto` section; `command` is `.llvmcmd`'s
/// cc1 command line ("" when none), kept in each image's strings.
Expected<ContainerSite> discover_bitcode_section(ByteView data, const std::string& command = "");
/// One bitcode module at `at` (scanning: it must hold a module block).
Expected<ContainerSite> discover_bitcode_module(ByteView at);
/// A file that is itself LLVM bitcode (`clang -emit-llvm -c`, `flang
/// --offload-device-only -emit-llvm`): raw (42 43 C0 DE) or wrapped (DE C0 17 0B),
/// one module or several back to back (`llvm-cat -b`), each one's top-level
/// blocks walked to the end and holding a module block.
Expected<ContainerSite> discover_bitcode_file(ByteView bytes);
/// A cubin or AMDGPU code object that is itself one image (`bytes` is all of it).
Expected<ContainerSite> discover_device_elf(ByteView bytes);
/// `clang-offload-bundler --type=o` output: one `__CLANG_OFFLOAD_BUNDLE__<id>`
/// section per entry, as one site (none when the object has no such section).
std::optional<ContainerSite> discover_object_bundle(const ElfFile& elf);

/// What an ELF image is, by its machine: cubin, code-object, object (unknown
/// when not ELF).
ImageKind classify_elf(ByteView data);

/// A cubin's architecture, "sm_NN", from its ELF header's e_flags (bits 8-15 from
/// ELF ABI version 8 on, CUDA 12.8+; bits 0-7 before); "" when `elf` is shorter
/// than the header.
std::string cubin_arch(ByteView elf);

// ---- From memory handed to a GPU runtime --------------------------------

/// The most a from-memory discoverer reads past an address when the caller
/// does not know the size (the headers bound what is actually read).
constexpr uint64_t kUnknownSize = uint64_t(1) << 40;

/// How many bytes may be read from an address (the hook layer: up to the end
/// of the loaded segment holding it). A from-memory discoverer reads no further
/// from the container a wrapper points to than the smaller of this and
/// `max_size`; nullptr: only `max_size` bounds it.
using ReadableExtent = uint64_t (*)(const void* address);

/// The container a registered `__fatBinC_Wrapper_t` (magic 0x466243B1, CUDA's
/// __cudaRegisterFatBinary argument) points to, sized from its header and
/// read no further than `max_size` bytes.
Expected<FatbinContainer> registered_fatbin(const void* wrapper, uint64_t max_size = kUnknownSize,
                                            ReadableExtent readable = nullptr);
/// The same, as a site (found_by wrapper, format cuda-fatbin).
Expected<ContainerSite> discover_registered_fatbin(const void* wrapper, uint64_t max_size = kUnknownSize,
                                                   ReadableExtent readable = nullptr);
/// The offload bundle a HIP wrapper ({"HIPF", version, bundle}, the argument
/// of __hipRegisterFatBinary) points to: plain, or compressed v2/v3 (a v1
/// CCOB does not say its size, so it is refused).
Expected<ContainerSite> discover_registered_bundle(const void* wrapper, uint64_t max_size = kUnknownSize,
                                                   ReadableExtent readable = nullptr);
/// A clang offload bundle at `at` in memory (its headers give its size): plain,
/// or compressed v2/v3 (CCOB v1 does not record its size, so it is refused).
/// Errors name the bundle's address.
Expected<ContainerSite> discover_bundle_in_memory(ByteView at);
/// An image handed to cuModuleLoadData / hipModuleLoadData and friends, sized
/// from its own headers: a fatbin container (format cuda-fatbin), a clang
/// offload bundle, plain or CCOB v2/v3 (offload-bundle: what hipModuleLoadData
/// takes besides a bare code object, ROCm/clr hipamd/src/hip_fatbin.cpp,
/// FatBinaryInfo::ExtractFatBinary and hip_code_object.cpp,
/// CodeObject::IsClangOffloadMagicBundle), an ELF cubin or code object
/// (device-elf), or NUL-terminated PTX text (device-elf, one ptx image; its
/// size includes the NUL).
Expected<ContainerSite> sized_device_image(const void* image, uint64_t max_size = kUnknownSize);

}  // namespace kir
