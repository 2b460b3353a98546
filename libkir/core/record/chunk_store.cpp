// The chunk store (kir/record/chunk_store.hpp) and atomic file writes.
#include "kir/record/chunk_store.hpp"

#include <chrono>

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "kir/support/compression.hpp"

namespace kir::record {

namespace {

Error os_error(const std::string& what, const std::string& path) {
  return Error(errno_code(errno), path + ": " + what + ": " + std::strerror(errno));
}

/// Recordings hold application memory: directories are the owner's only (0700).
Status make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return {};
  if (errno != EEXIST) return os_error("cannot create the directory", path);
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return os_error("cannot stat", path);
  if (!S_ISDIR(st.st_mode)) return Error(ErrorCode::io, path + ": exists and is not a directory");
  return {};
}

/// An existing recording directory: empty (just created, perhaps by another
/// rank), or holding chunks/ or records/. Anything else is someone's folder.
Status check_recording_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return os_error("cannot open the directory", path);
  bool empty = true, recording = false;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    empty = false;
    if (name == "chunks" || name == "records") recording = true;
  }
  ::closedir(dir);
  if (!empty && !recording)
    return Error(ErrorCode::bad_magic,
                 path + ": exists and is not a kir recording (no chunks/ or records/, and not empty)");
  return {};
}

/// ".<name>.<16 random hex digits>.tmp" beside `path`: unpredictable, and
/// readers skip names starting with '.'.
std::string temporary_name(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  uint64_t random = 0;
  if (::getrandom(&random, sizeof random, GRND_NONBLOCK) != ssize_t(sizeof random)) {
    static std::atomic<uint64_t> counter{0};  // no entropy yet: still unique in this process
    random = (uint64_t(::getpid()) << 32) ^ uint64_t(::time(nullptr)) ^ (++counter * 0x9E3779B97F4A7C15ull) ^
             std::hash<std::thread::id>()(std::this_thread::get_id());
  }
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", static_cast<unsigned long long>(random));
  return dir + "." + base + "." + digits + ".tmp";
}

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

/// Make a rename in `directory` durable.
Status sync_directory(const std::string& directory) {
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error("cannot open the directory", directory);
  int rc = ::fsync(fd);
  Status synced = rc == 0 || errno == EINVAL ? Status{} : os_error("fsync failed", directory);
  ::close(fd);
  return synced;
}

Status write_all(int fd, const uint8_t* p, uint64_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return os_error("write failed", path);
    p += n;
    size -= uint64_t(n);
  }
  return {};
}

/// Whether zstd is likely to shrink `raw`: a large chunk whose first 64 KiB
/// do not shrink by a tenth is stored raw without compressing the rest
/// (incompressible data, such as float results, costs zstd the most).
bool worth_compressing(ByteView raw) {
  constexpr uint64_t kProbe = 64 << 10;
  if (raw.size() <= 4 * kProbe) return true;
  thread_local std::vector<uint8_t> probe;
  Expected<uint64_t> n = compress_zstd(raw.sub(0, kProbe), 1, probe, 0);
  return n && *n < kProbe - kProbe / 10;
}

}  // namespace

Status write_file_atomically(const std::string& path, const void* bytes, uint64_t size, bool sync_parent,
                             bool sync_data) {
  return write_file_atomically(path, ByteView(static_cast<const uint8_t*>(bytes), size), ByteView(), sync_parent,
                               sync_data);
}

Status write_file_atomically(const std::string& path, ByteView head, ByteView body, bool sync_parent, bool sync_data,
                             bool start_writeback) {
  // A fresh, unpredictable name, created exclusively (never an existing file
  // or a symbolic link planted there), owner-only; (sync_data) its bytes on
  // disk before the rename, and (sync_parent) the rename on disk before returning.
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 16; ++attempt) {
    temporary = temporary_name(path);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return os_error("cannot create", temporary);
  Status written = write_all(fd, head.data(), head.size(), temporary);
  if (written) written = write_all(fd, body.data(), body.size(), temporary);
  if (written && sync_data && ::fsync(fd) != 0) written = os_error("fsync failed", temporary);
  // The disk starts on it now (issue 15: the record's one syncfs() then finds most
  // chunks written); a failure here loses only that head start.
  if (written && start_writeback && !sync_data) ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  if (::close(fd) != 0 && written) written = os_error("close failed", temporary);
  if (written && ::rename(temporary.c_str(), path.c_str()) != 0) written = os_error("cannot rename onto", path);
  if (!written) {
    ::unlink(temporary.c_str());
    return written;
  }
  return sync_parent ? sync_directory(directory_of(path)) : Status{};
}

// Chunks are renamed into place without an fsync each (one per 4 MiB chunk cost
// the writer 4x its throughput on the H200's disk); before a record naming them
// is written, one syncfs() puts every chunk's bytes and name on disk at once.
Status ChunkStore::sync() const {
  std::string chunks = directory_ + "/chunks";
  int fd = ::open(chunks.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error("cannot open the directory", chunks);
  int rc = ::syncfs(fd);
  Status synced = rc == 0 ? Status{} : os_error("syncfs failed", chunks);
  ::close(fd);
  return synced;
}

Expected<std::unique_ptr<ChunkStore>> ChunkStore::open(const std::string& directory, int zstd_level) {
  if (Status made = make_directory(directory); !made) return made.error();
  if (Status checked = check_recording_directory(directory); !checked) return checked.error();
  for (const std::string& dir : {directory + "/chunks", directory + "/records"})
    if (Status made = make_directory(dir); !made) return made.error();
  return std::unique_ptr<ChunkStore>(new ChunkStore(directory, zstd_level));
}

std::string ChunkStore::chunk_path(const Hash128& name) const {
  return directory_ + "/chunks/" + name.hex() + format::kChunkSuffix;
}

bool ChunkStore::claim(const Hash128& name) {
  std::unique_lock<std::mutex> lock(known_mutex_);
  for (;;) {
    auto [it, inserted] = known_.try_emplace(name, false);
    if (inserted) return true;
    if (it->second) return false;
    settled_.wait(lock);  // another thread is storing it: its record may not name it before it lands
  }
}

void ChunkStore::settle(const Hash128& name, bool stored) {
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    if (stored) known_[name] = true;
    else known_.erase(name);  // failed: a later put tries again
  }
  settled_.notify_all();
}

namespace {
uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
}  // namespace

Expected<Hash128> ChunkStore::put(ByteView raw) {
  uint64_t start = now_ns();
  Hash128 name = xxh3_128(raw);
  hash_ns_ += now_ns() - start;
  if (Status stored = put(raw, name); !stored) return stored.error();
  return name;
}

Status ChunkStore::put(ByteView raw, const Hash128& name) {
  if (!claim(name)) return {};
  Status stored = write_chunk(raw, name);
  settle(name, bool(stored));
  return stored;
}

Status ChunkStore::write_chunk(ByteView raw, const Hash128& name) {
  std::string path = chunk_path(name);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return {};  // stored by an earlier run or another rank
  thread_local std::vector<uint8_t> file;
  Expected<uint64_t> packed = uint64_t(raw.size());
  const format::Header& header = format::kChunkHeader;
  uint64_t start = now_ns();
  if (worth_compressing(raw)) packed = compress_zstd(raw, level_, file, header.size);
  compress_ns_ += now_ns() - start;
  if (!packed) return packed.error().within(path);
  format::Codec codec = format::Codec::zstd;
  ByteView body;                // the bytes after the header: in `file` (compressed), or the chunk itself
  if (*packed >= raw.size()) {  // incompressible: stored as it is, written from where it is (no copy)
    codec = format::Codec::raw;
    file.resize(header.size);
    body = raw;
  } else {
    body = ByteView(file.data() + header.size, file.size() - header.size);
  }
  namespace field = format::chunk_header;
  uint8_t* h = file.data();
  format::put_magic(h, header);
  format::put(h, field::version, format::kVersion);
  format::put(h, field::codec, uint32_t(codec));
  format::put(h, field::raw_size, raw.size());
  format::put(h, field::stored_size, body.size());
  format::put(h, field::hash_high, name.high);
  format::put(h, field::hash_low, name.low);
  // The directory is synced once per record (RecordBuilder::write), not per chunk.
  start = now_ns();
  Status written =
      write_file_atomically(path, ByteView(file.data(), header.size), body, false, false, early_writeback_);
  write_ns_ += now_ns() - start;
  if (!written) return written;  // made durable by sync() before a record names it
  stored_bytes_ += header.size + body.size();
  ++stored_chunks_;
  return {};
}

}  // namespace kir::record
