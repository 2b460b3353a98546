// Binary: every device-code container in a file, and where it was found.
//
// A file is an ELF (executable, shared library, relocatable object), an `ar`
// archive of ELF objects (each member reported by name), or a bare fatbin
// (`nvcc -fatbin`). Containers are found three ways:
//   section  walking `.nv_fatbin` / `__nv_relfatbin`, containers back to back
//            (8-aligned, zero padding allowed between them);
//   wrapper  following a `.nvFatBinSegment` wrapper whose container lies
//            elsewhere (virtual addresses mapped through the program headers;
//            in `.o` files the pointer is 0 plus a relocation);
//   scan     with BinaryOptions::scan, searching every section for the
//            container magic and keeping only candidates that validate
//            strictly (known entry kinds, plausible headers, exact sizes).
// Nothing is decompressed here: device_code() does that, one image at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kir/cuda/device_code.hpp"
#include "kir/cuda/fatbin.hpp"
#include "kir/support/compression.hpp"
#include "kir/support/error.hpp"
#include "kir/support/mapped_file.hpp"

namespace kir {

enum class FoundBy { section, wrapper, scan };
const char* found_by_name(FoundBy how);

/// A `__fatBinC_Wrapper_t` from `.nvFatBinSegment`.
struct FatbinWrapper {
  std::string member;        // archive member, "" outside archives
  uint64_t file_offset = 0;  // of the 24-byte struct
  uint32_t version = 0;      // 1, or 2 (prelinked list present)
  std::optional<uint64_t> container_offset;     // file offset of its container
  std::vector<uint64_t> prelinked_offsets;      // v2: file offsets of prelinked containers
};

/// One fatbin container and its place in the file.
struct ContainerSite {
  std::string member;        // archive member, "" outside archives
  std::string section;       // section holding it, "" when none
  uint64_t file_offset = 0;  // of the container header
  FoundBy found_by = FoundBy::section;
  FatbinContainer fatbin;
  std::optional<uint32_t> wrapper;  // index into Binary::wrappers() that points here
};

struct BinaryOptions {
  bool scan = false;  // also search every section for containers by magic
};

class Binary {
 public:
  static Expected<Binary> open(const std::string& path, BinaryOptions options = {});

  const std::string& path() const { return file_->path(); }
  /// "elf", "archive" or "fatbin".
  const std::string& format() const { return format_; }
  /// Archive member names (empty for other formats).
  const std::vector<std::string>& members() const { return members_; }
  const std::vector<ContainerSite>& containers() const { return containers_; }
  const std::vector<FatbinWrapper>& wrappers() const { return wrappers_; }
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

  /// Kernels, functions and globals of one image (decompressing it if needed).
  /// LTO-IR and obfuscated images have none.
  Expected<DeviceCode> device_code(uint32_t container, uint32_t entry) const;
  /// The same, decompressing into the caller's reusable buffer.
  Expected<DeviceCode> device_code(uint32_t container, uint32_t entry, Scratch& scratch) const;

  /// An image: (container index, entry index).
  using ImageRef = std::pair<uint32_t, uint32_t>;

  /// device_code() of each of `images`, on `threads` threads (0 = all cores),
  /// in the order given. `progress(done, total)` is called from one thread at
  /// a time. Each payload's pages are released once decoded.
  std::vector<Expected<DeviceCode>> device_code_of(
      const std::vector<ImageRef>& images, unsigned threads = 0,
      const std::function<void(size_t, size_t)>& progress = {}) const;

  /// device_code_of() every image, in container/entry order.
  std::vector<Expected<DeviceCode>> all_device_code(
      unsigned threads = 0, const std::function<void(size_t, size_t)>& progress = {}) const;

  /// Where an image is, for messages: "container #1 entry #2 (sm_90 cubin)".
  std::string image_label(uint32_t container, uint32_t entry) const;

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
