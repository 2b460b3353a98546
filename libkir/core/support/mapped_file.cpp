#include "kir/support/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kir {

namespace {

const char* file_type(mode_t mode) {
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symbolic link";
  return "unknown type";
}

/// Read up to `size` bytes at offset 0; a file that shrank meanwhile gives fewer.
Expected<uint64_t> read_all(int fd, uint8_t* out, uint64_t size, const std::string& path) {
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Error(ErrorCode::io, path + ": cannot read at byte " + std::to_string(done) + ": " + std::strerror(errno));
    if (n == 0) break;
    done += uint64_t(n);
  }
  return done;
}

}  // namespace

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked
  // on the open descriptor (no race with a rename), before anything is read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Error(errno_code(errno), path + ": cannot open: " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Error(ErrorCode::io, path + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Error(ErrorCode::invalid_argument, path + ": is a directory, not a binary");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error(ErrorCode::invalid_argument, path + ": not a regular file (" + file_type(st.st_mode) + ")");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint8_t* data = nullptr;
  bool copied = false;
  if (size > 0 && size <= kCopyLimit) {
    // Small files are copied: a file truncated by someone else afterwards
    // cannot take the process down with SIGBUS (a mapping would).
    uint8_t* copy = new (std::nothrow) uint8_t[size];
    if (!copy) {
      ::close(fd);
      return Error(ErrorCode::internal, path + ": cannot allocate " + std::to_string(size) + " bytes to read it");
    }
    Expected<uint64_t> n = read_all(fd, copy, size, path);
    if (!n) {
      delete[] copy;
      ::close(fd);
      return n.error();
    }
    size = *n;  // shrank while being read: what was there
    data = copy;
    copied = true;
  } else if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Error(ErrorCode::io, path + ": cannot map: " + std::strerror(err));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size, copied));
}

MappedFile::~MappedFile() {
  if (copied_) delete[] data_;
  else if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(ByteView view) const {
  if (copied_) return;  // memory of our own: dropping pages would lose the bytes
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // Whole pages, rounded outwards: a page shared with a neighbour is simply
  // read back in if the neighbour needs it again. Views stay valid either way.
  uint64_t begin = view.origin() & ~(page - 1);
  uint64_t end = std::min(align_up(view.origin() + view.size(), page), size_);
  if (!data_ || end <= begin) return;
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace kir
