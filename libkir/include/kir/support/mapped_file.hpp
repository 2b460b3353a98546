// MappedFile: a read-only memory mapping of a whole file, shared by every view
// that points into it. Nothing is read until a page is touched.
#pragma once

#include <memory>
#include <string>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

class MappedFile {
 public:
  /// Map `path`. Errors: missing file, a directory, unreadable.
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
  MappedFile(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
};

}  // namespace kir
