// The kernel-object cache (docs/cache.md): entries on disk under one directory,
// written atomically (private temporary, fsync, rename), read and checked once
// per process, then held in an insert-only hash table that readers probe with
// no lock, no system call and no allocation.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
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

std::string errno_text(int e) { return std::strerror(e); }

Error os_error(const std::string& what, const std::string& path, int e) {
  return Error(path + ": " + what + ": " + errno_text(e));
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

Status make_directories(const std::string& path) {
  if (path.empty()) return Error("cache directory: empty path");
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) return os_error("cannot create", prefix, errno);
  }
  return {};
}

/// A file read whole, with its identity.
enum class ReadState { found, missing, damaged, failed };
struct ReadResult {
  ReadState state = ReadState::failed;
  std::shared_ptr<Held> held;
  ParseError problem;  // damaged: what and where
  Error error{""};      // failed
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

ReadResult read_entry(const std::string& path, const Hash128* key, bool touch) {
  ReadResult r;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) return r.state = ReadState::missing, r;
    if (e == ELOOP) {  // a symbolic link where an entry belongs
      struct stat st;
      if (lstat(path.c_str(), &st) == 0) r.dev = st.st_dev, r.ino = st.st_ino;
      r.problem = {0, "a symbolic link, not an entry file"};
      return r.state = ReadState::damaged, r;
    }
    r.error = os_error("cannot open", path, e);
    return r.state = ReadState::failed, r;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return r.error = os_error("cannot stat", path, errno), r;
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  if (!S_ISREG(st.st_mode)) return r.problem = {0, "not a regular file"}, r.state = ReadState::damaged, r;
  uint64_t size = uint64_t(st.st_size);
  if (size > kMaxEntrySize)
    return r.problem = {0, "file of " + hex(size) + " bytes, larger than any entry (" + hex(kMaxEntrySize) + ")"},
           r.state = ReadState::damaged, r;
  auto held = std::make_shared<Held>();
  held->bytes.resize(size);
  uint64_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, held->bytes.data() + got, size - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return r.error = os_error("cannot read", path, errno), r;
    if (n == 0) break;  // shrank since fstat: the parser reports the truncation
    got += uint64_t(n);
  }
  held->bytes.resize(got);
  Expected<EntryView> e = parse_entry(ByteView(held->bytes.data(), got), key, &r.problem);
  if (!e) {
    r.foreign_version = r.problem.offset == field::kVersion;
    return r.state = ReadState::damaged, r;
  }
  fill(*held, *e);
  held->file_size = got;
  held->mtime_ns = mtime_ns(st);
  if (touch) {  // the LRU access stamp: the entry's modification time
    struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    (void)futimens(fd, times);  // a read-only cache (no write permission) is still a cache
  }
  r.held = std::move(held);
  r.state = ReadState::found;
  return r;
}

/// Remove `path` if it still is the file (dev, ino) we read.
void remove_if_same(const std::string& path, dev_t dev, ino_t ino) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino) (void)unlink(path.c_str());
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

/// The 2-hex-digit shard directories of `directory`, and the other names there.
Expected<std::vector<std::string>> names_in(const std::string& directory) {
  DirCloser dir{opendir(directory.c_str())};
  if (!dir.d) return os_error("cannot list", directory, errno);
  std::vector<std::string> names;
  while (struct dirent* d = readdir(dir.d)) {
    std::string name = d->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

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

Cache::Cache(std::string directory, const Options& options) : directory_(std::move(directory)), options_(options) {
  tables_.push_back(std::make_unique<Table>(kInitialSlots));
  table_.store(tables_.back().get(), std::memory_order_release);
}

Cache::~Cache() = default;

Expected<std::unique_ptr<Cache>> Cache::open(const std::string& directory, const Options& options) {
  if (directory.empty()) return Error("cache directory: empty path");
  if (options.create)
    if (Status s = make_directories(directory); !s) return s.error();
  struct stat st;
  if (stat(directory.c_str(), &st) != 0) return os_error("cannot open the cache directory", directory, errno);
  if (!S_ISDIR(st.st_mode)) return Error(directory + ": not a directory");
  // Absolute, so a later chdir of the process does not move the cache.
  std::string d = directory;
  if (char* real = realpath(directory.c_str(), nullptr)) {
    d = real;
    std::free(real);
  }
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return std::unique_ptr<Cache>(new Cache(std::move(d), options));
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

Expected<const Held*> Cache::lookup(const Hash128& key) {
  if (const Held* h = hit_in_memory(key)) return h;
  std::string path = directory_ + "/" + entry_relative_path(key);
  ReadResult r = read_entry(path, &key, true);
  switch (r.state) {
    case ReadState::found: {
      disk_hits_.fetch_add(1, std::memory_order_relaxed);
      auto held = std::make_unique<Held>(std::move(*r.held));
      // Moving keeps fill()'s pointers valid: the vectors hand over their buffers.
      return publish(std::move(held));
    }
    case ReadState::missing:
      misses_.fetch_add(1, std::memory_order_relaxed);
      return static_cast<const Held*>(nullptr);
    case ReadState::damaged:
      misses_.fetch_add(1, std::memory_order_relaxed);
      problem("cache entry " + path + ": " + r.problem.message);
      if (!r.foreign_version) remove_if_same(path, r.dev, r.ino);  // a newer kir's entry stays
      return static_cast<const Held*>(nullptr);
    case ReadState::failed:
      break;
  }
  errors_.fetch_add(1, std::memory_order_relaxed);
  return r.error;
}

Status Cache::store(const Hash128& key, const EntryView& entry) {
  EntryView e = entry;
  e.key = key;
  Expected<std::vector<uint8_t>> bytes = encode_entry(e);
  if (!bytes) return bytes.error().within("cache store of " + key.hex());
  std::string rel = entry_relative_path(key);
  std::string shard = directory_ + "/" + rel.substr(0, 2);
  std::string path = directory_ + "/" + rel;
  if (mkdir(shard.c_str(), 0777) != 0 && errno != EEXIST) return os_error("cannot create", shard, errno);
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    char unique[40];
    std::snprintf(unique, sizeof unique, "%d-%016llx", int(getpid()), (unsigned long long)unique_number());
    temporary = shard + "/" + kTemporaryPrefix + key.hex() + "-" + unique;
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return os_error("cannot create", temporary, errno);
  }
  if (fd < 0) return Error(shard + ": no unique temporary name after 16 attempts");
  Status written = write_all(fd, bytes->data(), bytes->size(), temporary);
  if (written && fsync(fd) != 0) written = os_error("cannot fsync", temporary, errno);
  if (::close(fd) != 0 && written) written = os_error("cannot close", temporary, errno);
  if (written && rename(temporary.c_str(), path.c_str()) != 0) written = os_error("cannot rename into place", path, errno);
  if (!written) {
    (void)unlink(temporary.c_str());
    return written;
  }
  if (int dfd = ::open(shard.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)fsync(dfd);  // the rename itself durable
    ::close(dfd);
  }
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
  std::string path = directory_ + "/" + entry_relative_path(key);
  if (unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return os_error("cannot remove", path, errno);
}

Expected<std::vector<Listing>> Cache::list(bool problems_too) const {
  Expected<std::vector<std::string>> top = names_in(directory_);
  if (!top) return top.error();
  std::vector<Listing> out;
  int64_t now = now_ns();
  auto stray = [&](const std::string& path, const struct stat& st, std::string problem) {
    Listing l;
    l.path = path;
    l.size = uint64_t(st.st_size);
    l.mtime_ns = mtime_ns(st);
    l.problem = std::move(problem);
    out.push_back(std::move(l));
  };
  for (const std::string& shard : *top) {
    std::string shard_path = directory_ + "/" + shard;
    struct stat st;
    if (lstat(shard_path.c_str(), &st) != 0) continue;  // removed meanwhile
    if (!S_ISDIR(st.st_mode) || !is_hex(shard, 2)) {
      if (problems_too) stray(shard_path, st, "not part of a kir cache (entries live in 2-hex-digit subdirectories)");
      continue;
    }
    Expected<std::vector<std::string>> names = names_in(shard_path);
    if (!names) return names.error();
    for (const std::string& name : *names) {
      std::string path = shard_path + "/" + name;
      if (lstat(path.c_str(), &st) != 0) continue;
      if (name.compare(0, std::strlen(kTemporaryPrefix), kTemporaryPrefix) == 0) {
        if (problems_too && now - mtime_ns(st) > kStaleTemporaryNs)
          stray(path, st, "stale temporary (a writer died before renaming it into place)");
        continue;
      }
      std::optional<Hash128> key = Hash128::from_hex(name);
      if (!key || name.compare(0, 2, shard) != 0) {
        if (problems_too) {
          stray(path, st, key ? "entry in the wrong subdirectory (expected " + name.substr(0, 2) + "/)"
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
      ReadResult r = read_entry(path, &*key, false);
      if (r.state == ReadState::missing) continue;  // removed meanwhile
      if (r.state == ReadState::found) {
        l.entry = std::move(r.held);
      } else if (r.state == ReadState::damaged) {
        l.problem = r.problem.message;
        l.problem_offset = r.problem.offset;
      } else {
        l.problem = r.error.message();
      }
      out.push_back(std::move(l));
    }
  }
  return out;
}

Expected<uint64_t> Cache::evict(uint64_t max_bytes, const Hash128* keep) {
  struct Candidate {
    std::string path;
    Hash128 key;
    uint64_t size;
    int64_t mtime;
    dev_t dev;
    ino_t ino;
  };
  Expected<std::vector<std::string>> top = names_in(directory_);
  if (!top) return top.error();
  std::vector<Candidate> all;
  uint64_t total = 0;
  int64_t now = now_ns();
  for (const std::string& shard : *top) {
    if (!is_hex(shard, 2)) continue;
    std::string shard_path = directory_ + "/" + shard;
    Expected<std::vector<std::string>> names = names_in(shard_path);
    if (!names) continue;  // removed meanwhile, or not a directory
    for (const std::string& name : *names) {
      std::string path = shard_path + "/" + name;
      struct stat st;
      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.compare(0, std::strlen(kTemporaryPrefix), kTemporaryPrefix) == 0) {
        if (now - mtime_ns(st) > kStaleTemporaryNs) (void)unlink(path.c_str());
        continue;
      }
      std::optional<Hash128> key = Hash128::from_hex(name);
      if (!key) continue;
      all.push_back({path, *key, uint64_t(st.st_size), mtime_ns(st), st.st_dev, st.st_ino});
      total += uint64_t(st.st_size);
    }
  }
  if (total <= max_bytes) return uint64_t(0);
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.path < b.path;
  });
  uint64_t removed = 0;
  for (const Candidate& c : all) {
    if (total <= max_bytes) break;
    if (keep && c.key == *keep) continue;
    struct stat st;
    // Still the file we saw, not used since: a writer's fresh entry or a
    // reader's touch since the scan keeps it.
    if (lstat(c.path.c_str(), &st) != 0) {
      total -= c.size;  // someone else removed it
      continue;
    }
    if (st.st_dev != c.dev || st.st_ino != c.ino || mtime_ns(st) != c.mtime) continue;
    if (unlink(c.path.c_str()) == 0) {
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

Expected<std::shared_ptr<Held>> Cache::read_file(const std::string& path, const Hash128* key, ParseError* error,
                                                  bool touch) {
  ReadResult r = read_entry(path, key, touch);
  switch (r.state) {
    case ReadState::found: return r.held;
    case ReadState::missing: return Error(path + ": no such entry");
    case ReadState::damaged:
      if (error) *error = r.problem;
      return Error("cache entry " + path + ": " + r.problem.message);
    case ReadState::failed: break;
  }
  return r.error;
}

}  // namespace kir::cache
