// Fuzz target for kir's parsers: every reader that takes untrusted bytes.
//
// Built two ways: with clang's -fsanitize=fuzzer (libFuzzer supplies main), or
// with any compiler plus standalone_driver.cpp (a small mutation loop), under
// AddressSanitizer and UndefinedBehaviorSanitizer either way. The only
// acceptable outcomes for any input are a value or a kir::Error.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kir/binary.hpp"
#include "kir/amdgpu/code_object.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/discover.hpp"
#include "kir/llvm/bitcode.hpp"
#include "kir/llvm/offload_binary.hpp"
#include "kir/llvm/offload_bundle.hpp"
#include "kir/object/archive.hpp"
#include "kir/object/elf.hpp"
#include "kir/support/compression.hpp"
#include "kir/support/kernel_pattern.hpp"
#include "kir/support/msgpack.hpp"

namespace {

void parse_as_elf(kir::ByteView bytes) {
  kir::Expected<kir::ElfFile> elf = kir::ElfFile::create(bytes);
  if (!elf) return;
  for (bool dynamic : {false, true})
    if (const kir::ElfSection* table = elf->symbol_table(dynamic)) (void)elf->symbols(*table);
  for (const kir::ElfSection& s : elf->sections())
    if (s.type == kir::elf::SHT_RELA) (void)elf->relocations(s);
  (void)elf->file_offset_of(0x1000, 16);
}

void parse_as_fatbin(kir::ByteView bytes) {
  kir::Expected<kir::FatbinContainer> c = kir::FatbinContainer::create(bytes);
  if (!c) return;
  for (const kir::FatbinEntry& e : c->entries()) (void)kir::read_image(e, 1 << 24);
}

void parse_as_llvm(kir::ByteView bytes) {
  (void)kir::OffloadBundle::create(bytes);
  if (kir::Expected<kir::CompressedBundle> c = kir::CompressedBundle::create(bytes))
    (void)c->decompress(1 << 24);
  (void)kir::OffloadBinary::create(bytes);
  if (kir::Expected<std::vector<kir::ByteView>> modules = kir::split_bitcode(bytes))
    for (kir::ByteView m : *modules) (void)kir::bitcode_blocks(m);
  (void)kir::parse_msgpack(bytes);
  (void)kir::measure_msgpack(bytes, 1 << 20, 32);
  (void)kir::parse_code_object(bytes);
}

/// The decoders as record chunks and fatbin entries use them: the input's first
/// 4 bytes claim the decoded size (bounded), the rest is the stream; a zstd
/// round trip of the whole input must give it back.
void decompress(kir::ByteView bytes) {
  if (bytes.size() < 4) return;
  uint32_t claim = 0;
  std::memcpy(&claim, bytes.data(), 4);
  uint64_t size = claim % (1u << 22);
  kir::ByteView stream(bytes.data() + 4, bytes.size() - 4);
  kir::Scratch scratch;
  (void)kir::decompress_lz4_block(stream, size, scratch);
  (void)kir::decompress_zstd(stream, size, scratch);
  (void)kir::decompress_zlib(stream, size, scratch);
  std::vector<uint8_t> packed;
  kir::Expected<uint64_t> n = kir::compress_zstd(bytes, 1, packed, 0);
  if (!n) __builtin_trap();
  kir::Expected<kir::ByteView> back = kir::decompress_zstd(kir::ByteView(packed.data(), *n), bytes.size(), scratch);
  if (!back || back->size() != bytes.size() || (bytes.size() && std::memcmp(back->data(), bytes.data(), bytes.size())))
    __builtin_trap();
}

/// Decode every image of a discovered site (CUDA images bounded, as above).
void decode_site(const kir::Expected<kir::ContainerSite>& site) {
  if (!site) return;
  kir::Scratch scratch;
  for (const kir::Image& image : site->images)
    if (image.fatbin) (void)kir::decode_image(*image.fatbin, scratch, 1 << 24);
    else (void)kir::decode_image(image, scratch);
}

/// Each format's discoverer on the bytes, as Binary::open and the scan call them.
void discover_from_file_bytes(kir::ByteView bytes) {
  for (bool strict : {false, true}) {
    decode_site(kir::discover_fatbin(bytes, {strict}));
    decode_site(kir::discover_bundle(bytes, {strict}));
  }
  decode_site(kir::discover_offload_binary(bytes));
  decode_site(kir::discover_bitcode_section(bytes, "-cc1"));
  decode_site(kir::discover_bitcode_module(bytes));
  decode_site(kir::discover_bitcode_file(bytes));
  decode_site(kir::discover_device_elf(bytes));
}

/// The from-memory entry points, given the input as the memory a wrapper (or
/// cuModuleLoadData) points to, bounded by the input's size.
void discover_from_memory(const uint8_t* data, size_t size) {
  uint8_t wrapper[24] = {};
  uint64_t pointer = reinterpret_cast<uintptr_t>(data);
  std::memcpy(wrapper + 8, &pointer, 8);
  for (uint32_t magic : {kir::kFatbinWrapperMagic, kir::kHipWrapperMagic}) {
    std::memcpy(wrapper, &magic, 4);
    decode_site(kir::discover_registered_fatbin(wrapper, size));
    decode_site(kir::discover_registered_bundle(wrapper, size));
    (void)kir::registered_fatbin(wrapper, size);
  }
  decode_site(kir::sized_device_image(data, size));
}

/// The whole pipeline, through a memory file, as `kir inspect --scan --kernels` runs it.
void open_as_binary(const uint8_t* data, size_t size) {
  int fd = memfd_create("kir-fuzz", 0);
  if (fd < 0) return;
  if (write(fd, data, size) == static_cast<ssize_t>(size)) {
    kir::BinaryOptions options;
    options.scan = true;
    kir::Expected<kir::Binary> b =
        kir::Binary::open("/proc/self/fd/" + std::to_string(fd), options);
    if (b) (void)b->all_device_code(1);
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kir::ByteView bytes(data, size);
  parse_as_elf(bytes);
  parse_as_fatbin(bytes);
  parse_as_llvm(bytes);
  (void)kir::Archive::create(bytes);
  (void)kir::parse_cubin(bytes);
  (void)kir::parse_ptx(bytes);
  decompress(bytes);
  discover_from_file_bytes(bytes);
  discover_from_memory(data, size);
  open_as_binary(data, size);
  // The input as a --kernel pattern (kir/support/kernel_pattern.hpp), matched against itself.
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (kir::Expected<kir::KernelPattern> pattern = kir::KernelPattern::create(text)) (void)pattern->search(text);
  return 0;
}
