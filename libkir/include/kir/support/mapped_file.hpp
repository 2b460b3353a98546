// MappedFile: the bytes of a whole file, shared by every view that points into
// it. Files up to kCopyLimit are read into memory at open, so a file truncated
// afterwards by another process cannot kill this one with SIGBUS; larger files
// are mapped read-only (nothing is read until a page is touched, and release()
// drops pages): such a file must not shrink while it is open — the kernel
// answers a read past the new end with SIGBUS, which no check beforehand can
// exclude (the file can shrink between the check and the read).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

class MappedFile {
 public:
  /// Files up to this size are copied into memory rather than mapped.
  static constexpr uint64_t kCopyLimit = uint64_t(64) << 20;

  /// Open `path` (without blocking: a FIFO is refused, not waited on) and copy
  /// or map it. Errors: missing file, a directory, not a regular file (fifo,
  /// device, socket), unreadable.
  static Expected<std::shared_ptr<const MappedFile>> open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  ByteView bytes() const { return ByteView(data_, size_, 0); }

  /// Hint that the pages under `view` (rounded out to whole pages) will not be
  /// needed again soon: they leave the process's resident set and are read
  /// back from the file if touched. `view` must point into this file.
  void release(ByteView view) const;

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size, bool copied)
      : path_(std::move(path)), data_(data), size_(size), copied_(copied) {}

  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
  bool copied_;
};

}  // namespace kir
