// The kernel-object cache (docs/cache.md): entries on disk under one directory,
// written atomically (private temporary, fsync, rename), read and checked once
// per process, then held in an insert-only hash table that readers probe with
// no lock, no system call and no allocation.
//
// Every file is reached from the directory's descriptor, opened once: shards with
// openat(O_DIRECTORY | O_NOFOLLOW), entries with openat(O_NOFOLLOW) in the shard,
// removals with unlinkat — no path is resolved twice and no link is followed
// inside the cache. A directory or entry not owned by the effective user (or
// root), or writable by others, is refused (Trust, "Who may write the cache").
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include "kir/cache.hpp"

namespace kir::cache {

namespace {

constexpr size_t kInitialSlots = 64;
constexpr int64_t kStaleTemporaryNs = int64_t(3600) * 1000000000;  // a writer that died an hour ago
constexpr const char* kTemporaryPrefix = ".tmp-";
/// DIR/.jit: the JIT's own state beside the entries (per-key locks, negative entries:
/// python/kir/jit/service.py, docs/cache.md); not part of the entries, not a stray.
constexpr const char* kJitState = ".jit";

std::string errno_text(int e) { return std::strerror(e); }

Error os_error(const std::string& what, const std::string& path, int e) {
  return Error(errno_code(e), path + ": " + what + ": " + errno_text(e));
}

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool is_hex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

/// A file descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  explicit operator bool() const { return fd >= 0; }
};

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

mode_t directory_mode(const Cache::Trust& t) { return t.shared ? 02770 : 0700; }
mode_t file_mode(const Cache::Trust& t) { return t.shared ? 0660 : 0600; }

/// Give a file or directory kir created its mode, whatever the umask, and a group
/// cache's group (the group first: a set-group-ID bit survives only then).
Status adopt(int fd, const std::string& path, mode_t mode, const Cache::Trust& t) {
  if (t.shared && fchown(fd, uid_t(-1), t.group) != 0)
    return os_error("cannot give it to group " + t.group_name, path, errno);
  if (fchmod(fd, mode) != 0) return os_error("cannot set mode " + octal_mode(mode), path, errno);
  return {};
}

/// Create `path` and its missing parents, each with the cache's directory mode.
Status make_directories(const std::string& path, const Cache::Trust& t) {
  if (path.empty()) return Error(ErrorCode::invalid_argument, "cache directory: empty path");
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      return os_error("cannot create", prefix, errno);
    }
    Fd fd(::open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return os_error("cannot open", prefix, errno);
    if (Status s = adopt(fd.fd, prefix, directory_mode(t), t); !s) return s;
  }
  return {};
}

Expected<Cache::Trust> trust_for(const std::string& group) {
  Cache::Trust t;
  t.user = geteuid();
  if (group.empty()) return t;
  std::vector<char> buffer(16384);
  struct group g, *found = nullptr;
  int e;
  while ((e = getgrnam_r(group.c_str(), &g, buffer.data(), buffer.size(), &found)) == ERANGE &&
         buffer.size() < (size_t(1) << 24))
    buffer.resize(buffer.size() * 2);  // a group of many members
  if (found) {
    t.group = found->gr_gid;
  } else if (group.size() < 10 &&
             std::all_of(group.begin(), group.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    t.group = gid_t(std::strtoul(group.c_str(), nullptr, 10));  // a number: the group need not be named
  } else {
    return Error(ErrorCode::not_found,
                 "cache group '" + group + "': " + (e ? errno_text(e) : std::string("no such group")));
  }
  t.shared = true;
  t.group_name = group;
  return t;
}

/// A file read whole, with its identity.
enum class ReadState { found, missing, damaged, refused, failed };
struct ReadResult {
  ReadState state = ReadState::failed;
  std::shared_ptr<Held> held;
  Error problem{""};  // damaged or refused: what (and where: its offset)
  Error error{""};    // failed
  dev_t dev = 0;
  ino_t ino = 0;
  bool foreign_version = false;
};

/// Build the C view of an entry whose bytes parsed as `e` (views into held.bytes).
void fill(Held& held, const EntryView& e) {
  size_t total = e.kind.size() + e.arch.size() + 2;
  for (const auto& [k, v] : e.meta) total += k.size() + v.size() + 2;
  held.strings.resize(total);
  char* p = held.strings.data();
  auto put = [&p](std::string_view s) {
    const char* start = p;
    std::memcpy(p, s.data(), s.size());
    p += s.size();
    *p++ = 0;
    return start;
  };
  held.key = e.key;
  held.entry.struct_size = sizeof(kir_cache_entry);
  held.entry.code_kind = put(e.kind);
  held.entry.image_kind = code_kind_number(e.kind);
  held.entry.arch = put(e.arch);
  held.meta.reserve(e.meta.size());
  for (const auto& [k, v] : e.meta) {
    const char* key = put(k);
    held.meta.push_back({key, put(v)});
  }
  held.entry.meta = held.meta.data();
  held.entry.meta_count = held.meta.size();
  held.entry.code = e.code.data();
  held.entry.code_size = e.code.size();
}

/// Read the entry `name` of the shard open as `shard` (`path` names it in messages).
ReadResult read_entry(int shard, const std::string& name, const std::string& path, const Hash128* key, bool touch,
                      const Cache::Trust& trust) {
  ReadResult r;
  Fd fd(::openat(shard, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) return r.state = ReadState::missing, r;
    if (e == ELOOP) {  // a symbolic link where an entry belongs
      struct stat st;
      if (fstatat(shard, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) r.dev = st.st_dev, r.ino = st.st_ino;
      r.problem = Error(ErrorCode::malformed, "a symbolic link, not an entry file", 0);
      return r.state = ReadState::damaged, r;
    }
    r.error = os_error("cannot open", path, e);
    return r.state = ReadState::failed, r;
  }
  struct stat st;
  if (fstat(fd.fd, &st) != 0) return r.error = os_error("cannot stat", path, errno), r;
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  if (std::string why = trust.refusal(st); !why.empty())  // not read: another user's, or writable by others
    return r.problem = Error(ErrorCode::permission, std::move(why)), r.state = ReadState::refused, r;
  if (!S_ISREG(st.st_mode))
    return r.problem = Error(ErrorCode::malformed, "not a regular file", 0), r.state = ReadState::damaged, r;
  uint64_t size = uint64_t(st.st_size);
  if (size > kMaxEntrySize)
    return r.problem = Error(ErrorCode::too_large,
                             "file of " + hex(size) + " bytes, larger than any entry (" + hex(kMaxEntrySize) + ")", 0),
           r.state = ReadState::damaged, r;
  auto held = std::make_shared<Held>();
  held->bytes.resize(size);
  uint64_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd.fd, held->bytes.data() + got, size - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return r.error = os_error("cannot read", path, errno), r;
    if (n == 0) break;  // shrank since fstat: the parser reports the truncation
    got += uint64_t(n);
  }
  held->bytes.resize(got);
  Expected<EntryView> e = parse_entry(ByteView(held->bytes.data(), got), key);
  if (!e) {
    r.problem = std::move(e.error());
    r.foreign_version = r.problem.code() == ErrorCode::unsupported_version;
    return r.state = ReadState::damaged, r;
  }
  fill(*held, *e);
  held->file_size = got;
  held->mtime_ns = mtime_ns(st);
  if (touch) {  // the LRU access stamp: the entry's modification time
    struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    (void)futimens(fd.fd, times);  // a read-only cache (no write permission) is still a cache
  }
  r.held = std::move(held);
  r.state = ReadState::found;
  return r;
}

/// Remove `name` from the directory open as `dir` if it still is the file (dev, ino)
/// we read (unlinkat removes a link itself, never what it points to).
void remove_if_same(int dir, const std::string& name, dev_t dev, ino_t ino) {
  struct stat st;
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev && st.st_ino == ino)
    (void)unlinkat(dir, name.c_str(), 0);
}

/// Whether `relative` (shard/name) may exist below the directory open as `dir`:
/// false only when it surely does not. One system call that follows no link
/// (openat2 RESOLVE_NO_SYMLINKS, O_PATH): a miss costs what one open did before
/// the shard was opened on its own. A link on the way (ELOOP), a kernel without
/// openat2 or a filter refusing it: "may exist", and the caller looks properly.
bool may_exist(int dir, const std::string& relative) {
#ifdef SYS_openat2
  struct open_how how{};
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH;
  long fd = syscall(SYS_openat2, dir, relative.c_str(), &how, sizeof how);
  if (fd >= 0) {
    ::close(int(fd));
    return true;
  }
  return errno != ENOENT;
#else
  (void)dir, (void)relative;
  return true;
#endif
}

/// A shard directory opened from the cache directory: never through a link, and
/// refused unless trusted.
enum class ShardState { found, missing, refused, failed };
struct Shard {
  ShardState state = ShardState::failed;
  Fd fd;
  std::string problem;  // refused: why; failed: the error
};

Shard open_shard(int directory, const std::string& name, const std::string& path, const Cache::Trust& trust) {
  Shard s;
  s.fd = Fd(::openat(directory, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!s.fd) {
    int e = errno;
    struct stat st;
    if (e == ENOENT) return s.state = ShardState::missing, std::move(s);
    if ((e == ELOOP || e == ENOTDIR) && fstatat(directory, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      s.problem = S_ISLNK(st.st_mode) ? "refused: a symbolic link, not a directory (never followed inside a cache)"
                                      : "refused: not a directory";
      return s.state = ShardState::refused, std::move(s);
    }
    s.problem = os_error("cannot open", path, e).message();
    return s.state = ShardState::failed, std::move(s);
  }
  struct stat st;
  if (fstat(s.fd.fd, &st) != 0) {
    s.problem = os_error("cannot stat", path, errno).message();
    return s.state = ShardState::failed, std::move(s);
  }
  s.problem = trust.refusal(st);
  s.state = s.problem.empty() ? ShardState::found : ShardState::refused;
  return s;
}

uint64_t unique_number() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ (uint64_t(getpid()) << 32) ^
                                   uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  return rng() ^ (counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull);
}

Status write_all(int fd, const uint8_t* data, size_t size, const std::string& path) {
  while (size) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error("cannot write", path, errno);
    data += n;
    size -= size_t(n);
  }
  return {};
}

struct DirCloser {
  DIR* d;
  ~DirCloser() {
    if (d) closedir(d);
  }
};

/// The names in the directory open as `dir` (`path` names it in messages), sorted.
Expected<std::vector<std::string>> names_in(int dir, const std::string& path) {
  int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // its own offset: fdopendir takes it
  if (fd < 0) return os_error("cannot list", path, errno);
  DirCloser d{fdopendir(fd)};
  if (!d.d) {
    int e = errno;
    ::close(fd);
    return os_error("cannot list", path, e);
  }
  std::vector<std::string> names;
  while (struct dirent* entry = readdir(d.d)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string Cache::Trust::refusal(const struct stat& st) const {
  std::string mode = "mode " + octal_mode(st.st_mode);
  if (st.st_mode & S_IWOTH) return "refused: writable by every user (" + mode + "; chmod o-w it)";
  bool group_ok = shared && st.st_gid == group;
  if ((st.st_mode & S_IWGRP) && !group_ok)
    return "refused: writable by group " + std::to_string(st.st_gid) + " (" + mode +
           "; chmod g-w it, or share the cache with that group: KIR_CACHE_GROUP)";
  if (st.st_uid != user && st.st_uid != 0 && !group_ok) {
    std::string you = "you (uid " + std::to_string(user) + ")";
    return shared ? "refused: owned by uid " + std::to_string(st.st_uid) + " and group " + std::to_string(st.st_gid) +
                        ", not by " + you + ", root or group " + group_name
                  : "refused: owned by uid " + std::to_string(st.st_uid) + ", not by " + you + " or root";
  }
  return "";
}

struct Cache::Table {
  explicit Table(size_t n) : mask(n - 1), slots(new std::atomic<const Held*>[n]) {
    for (size_t i = 0; i < n; ++i) slots[i].store(nullptr, std::memory_order_relaxed);
  }
  size_t mask;
  std::unique_ptr<std::atomic<const Held*>[]> slots;
  size_t count = 0;

  void insert(const Held* h) {
    size_t i = size_t(h->key.low) & mask;
    while (slots[i].load(std::memory_order_relaxed)) i = (i + 1) & mask;
    slots[i].store(h, std::memory_order_release);
    ++count;
  }
};

Cache::Cache(std::string directory, const Options& options, const Trust& trust, int directory_fd)
    : directory_(std::move(directory)), options_(options), trust_(trust), directory_fd_(directory_fd) {
  tables_.push_back(std::make_unique<Table>(kInitialSlots));
  table_.store(tables_.back().get(), std::memory_order_release);
}

Cache::~Cache() {
  if (directory_fd_ >= 0) ::close(directory_fd_);
}

Expected<std::unique_ptr<Cache>> Cache::open(const std::string& directory, const Options& options) {
  if (directory.empty()) return Error(ErrorCode::invalid_argument, "cache directory: empty path");
  Expected<Trust> trust = trust_for(options.group);
  if (!trust) return trust.error();
  if (options.create)
    if (Status s = make_directories(directory, *trust); !s) return s.error();
  // The directory itself may be reached through a link (a cache on scratch space);
  // nothing inside it is.
  Fd fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    int e = errno;
    if (e == ENOTDIR) return Error(ErrorCode::io, directory + ": not a directory");
    return os_error("cannot open the cache directory", directory, e);
  }
  struct stat st;
  if (fstat(fd.fd, &st) != 0) return os_error("cannot stat the cache directory", directory, errno);
  // Absolute, so messages name it wherever the process runs.
  std::string d = directory;
  if (char* real = realpath(directory.c_str(), nullptr)) {
    d = real;
    std::free(real);
  }
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  std::unique_ptr<Cache> cache(new Cache(std::move(d), options, *trust, fd.fd));
  fd.fd = -1;  // the cache's now
  if (std::string why = trust->refusal(st); !why.empty())
    cache->refused_ = "cache directory " + cache->directory_ + ": " + why;
  return cache;
}

unsigned Cache::stripe() {
  static std::atomic<unsigned> next{0};
  thread_local const unsigned mine = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return mine;
}

const Held* Cache::find_in_memory(const Hash128& key) const {
  const Table* t = table_.load(std::memory_order_acquire);
  for (size_t i = size_t(key.low) & t->mask;; i = (i + 1) & t->mask) {
    const Held* h = t->slots[i].load(std::memory_order_acquire);
    if (!h || h->key == key) return h;
  }
}

const Held* Cache::publish(std::unique_ptr<Held> held) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const Held* h = find_in_memory(held->key)) return h;  // another thread was first
  Table* t = table_.load(std::memory_order_relaxed);
  if ((t->count + 1) * 2 > t->mask + 1) {  // keep the load at most 1/2: probes stay short
    auto bigger = std::make_unique<Table>((t->mask + 1) * 2);
    for (const auto& h : held_) bigger->insert(h.get());
    tables_.push_back(std::move(bigger));  // the old table stays alive: readers may be probing it
    t = tables_.back().get();
    t->insert(held.get());
    held_.push_back(std::move(held));
    table_.store(t, std::memory_order_release);
  } else {
    t->insert(held.get());
    held_.push_back(std::move(held));
  }
  return held_.back().get();
}

void Cache::problem(const std::string& message) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  last_problem_ = message;
}

std::string Cache::last_problem() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_problem_;
}

Error Cache::refuse(const std::string& message) {
  misses_.fetch_add(1, std::memory_order_relaxed);
  problem(message);  // counted as an error
  return Error(ErrorCode::permission, message);
}

Expected<const Held*> Cache::lookup(const Hash128& key) {
  if (const Held* h = hit_in_memory(key)) return h;
  if (!refused_.empty()) return refuse(refused_);
  std::string rel = entry_relative_path(key), shard_name = rel.substr(0, 2), name = rel.substr(3);
  if (!may_exist(directory_fd_, rel)) {  // the common miss: one system call
    misses_.fetch_add(1, std::memory_order_relaxed);
    return static_cast<const Held*>(nullptr);
  }
  std::string shard_path = directory_ + "/" + shard_name, path = directory_ + "/" + rel;
  Shard shard = open_shard(directory_fd_, shard_name, shard_path, trust_);
  switch (shard.state) {
    case ShardState::found: break;
    case ShardState::missing: misses_.fetch_add(1, std::memory_order_relaxed); return static_cast<const Held*>(nullptr);
    case ShardState::refused: return refuse("cache directory " + shard_path + ": " + shard.problem);
    case ShardState::failed:
      errors_.fetch_add(1, std::memory_order_relaxed);
      return Error(ErrorCode::io, shard.problem);
  }
  ReadResult r = read_entry(shard.fd.fd, name, path, &key, true, trust_);
  switch (r.state) {
    case ReadState::found: {
      disk_hits_.fetch_add(1, std::memory_order_relaxed);
      auto held = std::make_unique<Held>(std::move(*r.held));
      // Moving keeps fill()'s pointers valid: the vectors hand over their buffers.
      return publish(std::move(held));
    }
    case ReadState::missing: misses_.fetch_add(1, std::memory_order_relaxed); return static_cast<const Held*>(nullptr);
    case ReadState::damaged:
      misses_.fetch_add(1, std::memory_order_relaxed);
      problem("cache entry " + path + ": " + r.problem.message());
      if (!r.foreign_version) remove_if_same(shard.fd.fd, name, r.dev, r.ino);  // a newer kir's entry stays
      return static_cast<const Held*>(nullptr);
    case ReadState::refused:  // left in place: `kir cache verify` shows it
      return refuse("cache entry " + path + ": " + r.problem.message());
    case ReadState::failed: break;
  }
  errors_.fetch_add(1, std::memory_order_relaxed);
  return r.error;
}

Status Cache::store(const Hash128& key, const EntryView& entry) {
  EntryView e = entry;
  e.key = key;
  Expected<std::vector<uint8_t>> bytes = encode_entry(e);
  if (!bytes) return bytes.error().within("cache store of " + key.hex());
  if (!refused_.empty()) return Error(ErrorCode::permission, refused_).within("cache store of " + key.hex());
  std::string rel = entry_relative_path(key), shard_name = rel.substr(0, 2), name = rel.substr(3);
  std::string shard_path = directory_ + "/" + shard_name, path = directory_ + "/" + rel;
  if (mkdirat(directory_fd_, shard_name.c_str(), 0700) == 0) {
    Fd created(::openat(directory_fd_, shard_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!created) return os_error("cannot open", shard_path, errno);
    if (Status s = adopt(created.fd, shard_path, directory_mode(trust_), trust_); !s) return s;
  } else if (errno != EEXIST) {
    return os_error("cannot create", shard_path, errno);
  }
  Shard shard = open_shard(directory_fd_, shard_name, shard_path, trust_);
  if (shard.state == ShardState::refused)
    return Error(ErrorCode::permission, "cache directory " + shard_path + ": " + shard.problem)
        .within("cache store of " + key.hex());
  if (shard.state != ShardState::found)
    return Error(ErrorCode::io,
                 shard.state == ShardState::missing ? shard_path + ": removed while storing" : shard.problem);
  const int dir = shard.fd.fd;
  std::string temporary;
  Fd fd;
  for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
    char unique[40];
    std::snprintf(unique, sizeof unique, "%d-%016llx", int(getpid()), (unsigned long long)unique_number());
    temporary = kTemporaryPrefix + key.hex() + "-" + unique;
    fd = Fd(::openat(dir, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd && errno != EEXIST) return os_error("cannot create", shard_path + "/" + temporary, errno);
  }
  if (!fd) return Error(ErrorCode::io, shard_path + ": no unique temporary name after 16 attempts");
  std::string temporary_path = shard_path + "/" + temporary;
  Status written = adopt(fd.fd, temporary_path, file_mode(trust_), trust_);
  if (written) written = write_all(fd.fd, bytes->data(), bytes->size(), temporary_path);
  if (written && fsync(fd.fd) != 0) written = os_error("cannot fsync", temporary_path, errno);
  int closed = ::close(fd.fd);
  fd.fd = -1;
  if (closed != 0 && written) written = os_error("cannot close", temporary_path, errno);
  if (written && renameat(dir, temporary.c_str(), dir, name.c_str()) != 0)
    written = os_error("cannot rename into place", path, errno);
  if (!written) {
    (void)unlinkat(dir, temporary.c_str(), 0);
    return written;
  }
  (void)fsync(dir);  // the rename itself durable
  stores_.fetch_add(1, std::memory_order_relaxed);
  if (!find_in_memory(key)) {
    auto held = std::make_unique<Held>();
    held->bytes = std::move(*bytes);
    Expected<EntryView> parsed = parse_entry(ByteView(held->bytes.data(), held->bytes.size()), &key);
    if (!parsed) return parsed.error().within("cache store of " + key.hex() + ": written entry");  // a bug
    fill(*held, *parsed);
    held->file_size = held->bytes.size();
    held->mtime_ns = now_ns();
    publish(std::move(held));
  }
  if (options_.max_bytes) {
    Expected<uint64_t> evicted = evict(options_.max_bytes, &key);
    if (!evicted) return evicted.error();
  }
  return {};
}

Expected<bool> Cache::remove(const Hash128& key) {
  std::string rel = entry_relative_path(key), shard_name = rel.substr(0, 2), name = rel.substr(3);
  std::string shard_path = directory_ + "/" + shard_name, path = directory_ + "/" + rel;
  // Removing reads nothing: a refused shard's entry may go, but never through a link.
  Fd shard(::openat(directory_fd_, shard_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!shard) {
    if (errno == ENOENT) return false;
    if (errno == ELOOP || errno == ENOTDIR)
      return Error(ErrorCode::permission, shard_path + ": not a directory (a link is never followed)");
    return os_error("cannot open", shard_path, errno);
  }
  if (unlinkat(shard.fd, name.c_str(), 0) == 0) return true;
  if (errno == ENOENT) return false;
  return os_error("cannot remove", path, errno);
}

Expected<std::vector<Listing>> Cache::list(bool problems_too) const {
  std::vector<Listing> out;
  auto stray = [&](const std::string& path, const struct stat& st, std::string problem, bool refused = false) {
    Listing l;
    l.path = path;
    l.size = uint64_t(st.st_size);
    l.mtime_ns = mtime_ns(st);
    l.problem = std::move(problem);
    l.refused = refused;
    out.push_back(std::move(l));
  };
  if (!refused_.empty()) {  // nothing beneath a refused directory is read
    struct stat st;
    if (problems_too && fstat(directory_fd_, &st) == 0) stray(directory_, st, trust_.refusal(st), true);
    return out;
  }
  Expected<std::vector<std::string>> top = names_in(directory_fd_, directory_);
  if (!top) return top.error();
  int64_t now = now_ns();
  for (const std::string& shard_name : *top) {
    std::string shard_path = directory_ + "/" + shard_name;
    struct stat st;
    if (fstatat(directory_fd_, shard_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // removed meanwhile
    if (shard_name == kJitState) continue;
    if (!is_hex(shard_name, 2) || !(S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode))) {
      if (problems_too) stray(shard_path, st, "not part of a kir cache (entries live in 2-hex-digit subdirectories)");
      continue;
    }
    Shard shard = open_shard(directory_fd_, shard_name, shard_path, trust_);
    if (shard.state == ShardState::missing) continue;
    if (shard.state == ShardState::failed) return Error(ErrorCode::io, shard.problem);
    if (shard.state == ShardState::refused) {
      if (problems_too) stray(shard_path, st, shard.problem, true);
      continue;
    }
    Expected<std::vector<std::string>> names = names_in(shard.fd.fd, shard_path);
    if (!names) return names.error();
    for (const std::string& name : *names) {
      std::string path = shard_path + "/" + name;
      if (fstatat(shard.fd.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (name.compare(0, std::strlen(kTemporaryPrefix), kTemporaryPrefix) == 0) {
        if (problems_too && now - mtime_ns(st) > kStaleTemporaryNs)
          stray(path, st, "stale temporary (a writer died before renaming it into place)");
        continue;
      }
      std::optional<Hash128> key = Hash128::from_hex(name);
      if (!key || name.compare(0, 2, shard_name) != 0) {
        if (problems_too) {
          stray(path, st,
                key ? "entry in the wrong subdirectory (expected " + name.substr(0, 2) + "/)"
                    : "not a cache entry name (32 lowercase hex digits)");
          if (key) out.back().key = *key, out.back().has_key = true;
        }
        continue;
      }
      Listing l;
      l.path = path;
      l.key = *key;
      l.has_key = true;
      l.size = uint64_t(st.st_size);
      l.mtime_ns = mtime_ns(st);
      ReadResult r = read_entry(shard.fd.fd, name, path, &*key, false, trust_);
      if (r.state == ReadState::missing) continue;  // removed meanwhile
      if (r.state == ReadState::found) {
        l.entry = std::move(r.held);
      } else if (r.state == ReadState::damaged || r.state == ReadState::refused) {
        l.problem = r.problem.message();
        l.problem_offset = r.problem.raw_offset();
        l.refused = r.state == ReadState::refused;
      } else {
        l.problem = r.error.message();
      }
      out.push_back(std::move(l));
    }
  }
  return out;
}

Expected<uint64_t> Cache::evict(uint64_t max_bytes, const Hash128* keep) {
  if (!refused_.empty()) return Error(ErrorCode::permission, refused_);
  struct Candidate {
    std::string shard, name;
    Hash128 key;
    uint64_t size;
    int64_t mtime;
    dev_t dev;
    ino_t ino;
  };
  Expected<std::vector<std::string>> top = names_in(directory_fd_, directory_);
  if (!top) return top.error();
  std::vector<Candidate> all;
  uint64_t total = 0;
  int64_t now = now_ns();
  // Only trusted shards count and lose files, each reached without following a link.
  for (const std::string& shard_name : *top) {
    if (!is_hex(shard_name, 2)) continue;
    Shard shard = open_shard(directory_fd_, shard_name, directory_ + "/" + shard_name, trust_);
    if (shard.state != ShardState::found) continue;  // removed meanwhile, a link, or refused
    Expected<std::vector<std::string>> names = names_in(shard.fd.fd, directory_ + "/" + shard_name);
    if (!names) continue;
    for (const std::string& name : *names) {
      struct stat st;
      if (fstatat(shard.fd.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.compare(0, std::strlen(kTemporaryPrefix), kTemporaryPrefix) == 0) {
        if (now - mtime_ns(st) > kStaleTemporaryNs) (void)unlinkat(shard.fd.fd, name.c_str(), 0);
        continue;
      }
      std::optional<Hash128> key = Hash128::from_hex(name);
      if (!key || !trust_.refusal(st).empty()) continue;  // a refused entry is neither counted nor evicted
      all.push_back({shard_name, name, *key, uint64_t(st.st_size), mtime_ns(st), st.st_dev, st.st_ino});
      total += uint64_t(st.st_size);
    }
  }
  if (total <= max_bytes) return uint64_t(0);
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.mtime != b.mtime) return a.mtime < b.mtime;
    return a.shard != b.shard ? a.shard < b.shard : a.name < b.name;
  });
  uint64_t removed = 0;
  for (const Candidate& c : all) {
    if (total <= max_bytes) break;
    if (keep && c.key == *keep) continue;
    Shard shard = open_shard(directory_fd_, c.shard, directory_ + "/" + c.shard, trust_);
    struct stat st;
    // Still the file we saw, not used since: a writer's fresh entry or a
    // reader's touch since the scan keeps it.
    if (shard.state != ShardState::found || fstatat(shard.fd.fd, c.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      total -= c.size;  // someone else removed it (or its shard)
      continue;
    }
    if (st.st_dev != c.dev || st.st_ino != c.ino || mtime_ns(st) != c.mtime) continue;
    if (unlinkat(shard.fd.fd, c.name.c_str(), 0) == 0) {
      total -= c.size;
      ++removed;
    }
  }
  evictions_.fetch_add(removed, std::memory_order_relaxed);
  return removed;
}

Stats Cache::stats() const {
  Stats s;
  for (const Stripe& stripe : memory_hits_) s.memory_hits += stripe.n.load(std::memory_order_relaxed);
  s.hits = s.memory_hits + disk_hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  s.evictions = evictions_.load(std::memory_order_relaxed);
  s.stores = stores_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kir::cache
