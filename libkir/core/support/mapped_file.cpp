#include "kir/support/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kir {

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Error(path + ": is a directory, not a binary");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error(path + ": not a regular file");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Error(path + ": cannot map: " + std::strerror(err));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(ByteView view) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // Whole pages, rounded outwards: a page shared with a neighbour is simply
  // read back in if the neighbour needs it again. Views stay valid either way.
  uint64_t begin = view.origin() & ~(page - 1);
  uint64_t end = std::min(align_up(view.origin() + view.size(), page), size_);
  if (!data_ || end <= begin) return;
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace kir
