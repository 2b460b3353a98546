// Binary: every device-code container in a file, and where it was found.
//
// A file is an ELF (executable, shared library, relocatable object), an `ar`
// archive of ELF objects (each member reported by name), a bare fatbin
// (`nvcc -fatbin`) or a bare offload bundle. Containers of every format hold
// Images of one shape (kind, target, triple, stored bytes, size), so clients
// walk CUDA fatbins and clang offload bundles the same way.
//
// CUDA fatbin containers are found three ways:
//   section  walking `.nv_fatbin` / `__nv_relfatbin`, containers back to back
//            (8-aligned, zero padding allowed between them);
//   wrapper  following a `.nvFatBinSegment` wrapper whose container lies
//            elsewhere (virtual addresses mapped through the program headers;
//            in `.o` files the pointer is 0 plus a relocation);
//   scan     with BinaryOptions::scan, searching every section for the
//            container magic and keeping only candidates that validate
//            strictly (known entry kinds, plausible headers, exact sizes).
// Clang offload bundles are found in `.hip_fatbin` (several per section, by
// their magic), in `__CLANG_OFFLOAD_BUNDLE__<id>` sections of object files,
// and, with scan, anywhere. Images are not decompressed here: device_code()
// does that, one image at a time. (A compressed bundle is the exception: its
// entry table is inside the compressed data, so it is inflated at open.)
//
// Reading one container is its format's discoverer's job (kir/discover.hpp),
// the same code the hook layer runs on memory handed to a GPU runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kir/cuda/fatbin.hpp"
#include "kir/device_code.hpp"
#include "kir/llvm/offload_binary.hpp"
#include "kir/llvm/offload_bundle.hpp"
#include "kir/model.hpp"
#include "kir/support/compression.hpp"
#include "kir/support/error.hpp"
#include "kir/support/mapped_file.hpp"

namespace kir {

enum class FoundBy { section, wrapper, scan };
const char* found_by_name(FoundBy how);

// ContainerFormat: kir/model.hpp (name(format) gives "cuda-fatbin", "device-elf" ...).

/// One device image or embedded module, whatever container holds it.
struct Image {
  uint32_t index = 0;                   // position in its container
  ImageKind kind = ImageKind::unknown;  // kir/model.hpp (a fatbin entry's raw kind: fatbin->kind)
  std::string target;                   // "sm_90", "gfx90a:xnack+", "" when none
  std::string triple;                   // "nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa-", "" when unknown
  std::string id;                       // bundle entry id, or the fatbin entry's identifier
  Compression compression = Compression::none;
  ByteView stored;                                           // the bytes as stored (compressed when compressed)
  std::optional<uint64_t> file_offset;                       // of `stored`, when it lies in the file as is
  uint64_t size = 0;                                         // bytes once decoded
  std::optional<FatbinEntry> fatbin;                         // CUDA: every header field
  std::vector<std::pair<std::string, std::string>> strings;  // offloading binary string map

  /// The target's family (cuda for "sm_90", amdgpu for "gfx90a:xnack+", none for "").
  TargetKind target_kind() const { return target_kind_of(target); }
};

/// The image's bytes, decoded (into `scratch` when decompression is needed).
Expected<ByteView> decode_image(const Image& image, Scratch& scratch);

/// A `__fatBinC_Wrapper_t` from `.nvFatBinSegment` (or HIP's from `.hipFatBinSegment`).
struct FatbinWrapper {
  std::string member;                        // archive member, "" outside archives
  bool hip = false;                          // "HIPF" magic: points at an offload bundle
  uint64_t file_offset = 0;                  // of the 24-byte struct
  uint32_t version = 0;                      // 1, or 2 (prelinked list present)
  std::optional<uint64_t> container_offset;  // file offset of its container
  std::vector<uint64_t> prelinked_offsets;   // v2: file offsets of prelinked containers
};

/// One container and its place in the file.
struct ContainerSite {
  std::string member;        // archive member, "" outside archives
  std::string section;       // section holding it, "" when none
  uint64_t file_offset = 0;  // of the container header (object bundles: of the first entry)
  FoundBy found_by = FoundBy::section;
  ContainerFormat format = ContainerFormat::cuda_fatbin;
  uint32_t version = 0;     // container format version (fatbin 1; CCOB 1..3; else 0)
  uint64_t size = 0;        // bytes in the file
  std::string compression;  // a compressed bundle's codec: "zlib", "zstd"; else ""
  std::vector<Image> images;
  std::optional<uint32_t> wrapper;                       // index into Binary::wrappers() that points here
  std::shared_ptr<const std::vector<uint8_t>> inflated;  // a compressed container, decompressed
};

struct BinaryOptions {
  bool scan = false;  // also search every section for containers of every format by magic
  /// Also search an ELF's data sections (allocated, not executable: .rodata, .data,
  /// .ldata, .lrodata, ...) for CUDA fatbins by their magic, as `scan` does for every
  /// section. Libraries that embed fatbins as plain data (cuFFT's 24k fatbins in
  /// .ldata) hold them there and nothing in .nv_fatbin points at them.
  bool scan_data = true;
};

class Binary {
 public:
  static Expected<Binary> open(const std::string& path, BinaryOptions options = {});

  const std::string& path() const { return file_->path(); }
  /// "elf", "archive", "fatbin" or "offload-bundle".
  const std::string& format() const { return format_; }
  /// Archive member names (empty for other formats).
  const std::vector<std::string>& members() const { return members_; }
  const std::vector<ContainerSite>& containers() const { return containers_; }
  const std::vector<FatbinWrapper>& wrappers() const { return wrappers_; }
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

  /// Kernels, functions and globals of one image (decompressing it if needed).
  /// LTO-IR and obfuscated images have none.
  Expected<DeviceCode> device_code(uint32_t container, uint32_t image) const;
  /// The same, decompressing into the caller's reusable buffer.
  /// `digest` also records the decoded image's XXH3-128 (for static hashes).
  Expected<DeviceCode> device_code(uint32_t container, uint32_t image, Scratch& scratch, bool digest = false) const;

  /// An image: (container index, image index in the container).
  using ImageRef = std::pair<uint32_t, uint32_t>;

  /// device_code() of each of `images`, on `threads` threads (0 = all cores),
  /// in the order given. `progress(done, total)` is called from one thread at
  /// a time. Each payload's pages are released once decoded.
  std::vector<Expected<DeviceCode>> device_code_of(const std::vector<ImageRef>& images, unsigned threads = 0,
                                                   const std::function<void(size_t, size_t)>& progress = {},
                                                   bool digests = false) const;

  /// device_code_of() every image, in container/entry order.
  std::vector<Expected<DeviceCode>> all_device_code(unsigned threads = 0,
                                                    const std::function<void(size_t, size_t)>& progress = {}) const;

  /// Where an image is, for messages: "container #1 image #2 (sm_90 cubin)".
  std::string image_label(uint32_t container, uint32_t image) const;

 private:
  Binary() = default;
  friend class BinaryReader;

  std::shared_ptr<const MappedFile> file_;
  std::string format_;
  std::vector<std::string> members_;
  std::vector<ContainerSite> containers_;
  std::vector<FatbinWrapper> wrappers_;
};

}  // namespace kir
