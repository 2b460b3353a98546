// libkir_jit.so: the reference JIT client of the hook layer (KIR_HOOK_CLIENTS,
// or `kir run --jit-cache DIR -- APP`). Proteus's runtime role reduced to what
// kir provides: at each launch of a kernel with runtime-constant arguments
// (kir_hook_kernel.jit_args, captured from the Proteus ABI; every kernel with
// KIR_JIT_ALL=1) it computes the launch's JIT key (kir_jit_key, docs/hashing.md),
// looks it up in the kernel-object cache (kir/cache.h) and, on a hit, claims the
// launch with the cached code (hook API 4, KIR_SUBSTITUTE_CODE: the layer loads
// it once per context, CUDA, or device, HIP). CUDA and HIP launches alike: the
// launch's arch is the hook's (API 7: "sm_90"; HIP the kernel's code-object target,
// "gfx942:sramecc+:xnack-"), its runtime kir_hook_launch.vendor (API 11), which picks
// the device-to-host copy and the code kind the key's CONFIG names ("cubin", HIP
// "code-object": what kir.jit compiles for a gfx arch). On a miss the original runs, and the key with its inputs
// is logged once, as the `kir jit compile` command that fills it. A cache
// directory, shard or entry the cache refuses (another user's, writable by
// others, a link: docs/cache.md) is one logged line and an error; the original
// runs. At most kLogLines lines are logged, then one summary line: the counters
// count every launch. A missed key is looked up again after KIR_JIT_RECHECK_MS;
// at most kRemembered missed keys are remembered (then all are forgotten at once).
//
// With a compile service (KIR_JIT_SERVICE, started by `kir run`: python/kir/jit/
// service.py), a miss is compiled, out of the app's process: the request carries the
// kernel's IR (kir_hook_kernel_ir), name, arch, static hash, the runtime-constant
// values the key hashed (as kir_jit_key returns them: arrays behind pointers read from
// the device once), the lambda captures the key covers, the dims/bounds when
// specialized and the key; the service
// compiles with kir.jit, checks that the result's key is this key and stores it in
// the cache. sync (default): the launch waits for the answer, then looks the key up
// again and launches the code; async: the request is queued and the original runs
// until a recheck finds the entry. One connection per request (nothing shared with
// a forked child); whatever fails (no service, a timeout, a compile error, a full
// queue), the app's own kernel runs. A key whose compile failed is not asked again.
//
// Settings (read once, when the layer loads the client; docs/jit.md):
//   KIR_JIT_CACHE=DIR        the cache (required: without it nothing is claimed)
//   KIR_JIT_ALL=1            every kernel, not only those with JIT arguments
//   KIR_JIT_CONFIG=K=HEX,... the CONFIG records, as `kir.jit.Options().config()`
//                            gives them (values hex-encoded); default: those of
//                            the default options (opt 3, codegen-opt 3, kind cubin, fp-contract auto);
//                            kind cubin is HIP launches' code-object (kir.jit's default for gfx)
//   KIR_JIT_SPECIALIZE=grid,block  the key covers grid / block (the code was
//                            compiled for them: `kir jit compile --grid/--block`)
//   KIR_JIT_BOUNDS=MAXT[,MINB]     launch bounds the code was compiled with
//   KIR_JIT_STATS=PATH       at exit, the counters as one JSON object (else one
//                            stderr line when anything was looked up)
//   KIR_JIT_RECHECK_MS=N     a key that missed is looked up again after N ms
//                            (default 1000: another process may fill it)
//   KIR_CACHE_GROUP=GROUP    the cache is shared with GROUP's members (docs/cache.md)
//   KIR_JIT_SERVICE=PATH     the compile service's Unix socket (`kir run` sets it)
//   KIR_JIT_MODE=sync|async  wait for a miss's code (default) or run the original meanwhile
//   KIR_JIT_TIMEOUT_MS=N     sync: the longest a launch waits for its code (default 120000)
//   KIR_JIT_DISABLE=1        look nothing up, claim nothing (PROTEUS_DISABLE, via `kir run`)
//   KIR_JIT_ARGS=0           the key covers no argument value (PROTEUS_SPECIALIZE_ARGS=0)
//   KIR_JIT_BOUNDS=launch    launch bounds = each launch's block size (PROTEUS_SPECIALIZE_LAUNCH_BOUNDS)
#include <dlfcn.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kir/cache.h"
#include "kir/hash/jit_key.hpp"
#include "kir/hooks.h"
#include "kir/kir.h"
#include "kir/model.hpp"
#include "kir/support/json.hpp"
#include "kir_hook_internal/settings.hpp"
// This library is dlopen()ed by the layer, and its per-thread state (ThreadState,
// 8 KiB) is too large for the static TLS block: its counters use the default model.
#define KIR_TLS_INITIAL_EXEC
#include "kir_hook_internal/thread_counters.hpp"

#define KIR_JIT_EXPORT __attribute__((visibility("default")))

namespace {

/// A device-to-host copy through the runtime's entry point `f`: 0, or -1.
/// cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) (cuda.h).
int cuda_copy(void* f, uint64_t address, void* out, size_t size) {
  return reinterpret_cast<int (*)(void*, unsigned long long, size_t)>(f)(out, address, size) == 0 ? 0 : -1;
}
/// hipMemcpyDtoH(void* dst, hipDeviceptr_t src, size_t sizeBytes), hipDeviceptr_t = void* (ROCm
/// hip/hip_runtime_api.h and hip/driver_types.h: Debian's 5.2.3 and ROCm/HIP 6.x alike).
int hip_copy(void* f, uint64_t address, void* out, size_t size) {
  return reinterpret_cast<int (*)(void*, void*, size_t)>(f)(out, reinterpret_cast<void*>(address), size) == 0 ? 0 : -1;
}

/// What the client needs of a launch's GPU runtime, chosen by kir_hook_launch.vendor (hooks.h
/// API 11): its device-to-host copy (the arrays behind pointers a key reads) through the
/// runtime's own entry point (kir_hook_vendor_symbol, never the layer's interposer), and the
/// JIT key's CONFIG records for its code.
struct Runtime {
  int vendor;              ///< KIR_HOOK_VENDOR_*
  const char* copy_entry;  ///< its device-to-host copy, called by `call_copy`
  int (*call_copy)(void* f, uint64_t address, void* out, size_t size);
  /// What the default kind "cubin" (kir.jit.Options()) is for this runtime's archs: kir.jit
  /// compiles an AMDGPU arch's default kind as "code-object" (python/kir/jit/__init__.py,
  /// _for_target), and its key's CONFIG `kind` says so.
  const char* default_kind;
  std::atomic<void*> copy{nullptr};  ///< copy_entry, found on first use
  std::string config_records;        ///< the client's CONFIG records, as this runtime's code is keyed

  Runtime(int v, const char* entry, int (*call)(void*, uint64_t, void*, size_t), const char* kind)
      : vendor(v), copy_entry(entry), call_copy(call), default_kind(kind) {}

  /// copy_entry, looked up until found (a runtime may be loaded after the client).
  void* find() {
    void* f = copy.load(std::memory_order_acquire);
    if (!f && (f = kir_hook_vendor_symbol(vendor, copy_entry))) copy.store(f, std::memory_order_release);
    return f;
  }

  int read(uint64_t address, void* out, size_t size) {
    void* f = find();
    return f ? call_copy(f, address, out, size) : -1;
  }
};

struct KeyHash {
  size_t operator()(const kir_hash128& k) const { return size_t(k.high ^ (k.low * 0x9e3779b97f4a7c15ull)); }
};
struct KeyEqual {
  bool operator()(const kir_hash128& a, const kir_hash128& b) const { return a.high == b.high && a.low == b.low; }
};

uint64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec);
}

std::string hex(kir_hash128 h) {
  char text[33];
  kir_hash_to_hex(h, text);
  return text;
}

/// One scalar argument as `kir jit compile --arg` reads it (POS:TYPE:VALUE), or "".
std::string arg_text(const kir_jit_arg& a, const void* value) {
  if (a.kind != KIR_JIT_SCALAR || !value || !kir::is_arg_type(a.type)) return "";
  char buf[96];
  const char* t = kir::name(static_cast<kir::ArgType>(a.type));
  auto as = [&](auto v) {
    std::memcpy(&v, value, sizeof v);
    return v;
  };
  switch (a.type) {
    case KIR_ARG_I8: std::snprintf(buf, sizeof buf, "%d", int(as(int8_t()))); break;
    case KIR_ARG_I16: std::snprintf(buf, sizeof buf, "%d", int(as(int16_t()))); break;
    case KIR_ARG_I32: std::snprintf(buf, sizeof buf, "%d", as(int32_t())); break;
    case KIR_ARG_I64: std::snprintf(buf, sizeof buf, "%" PRId64, as(int64_t())); break;
    case KIR_ARG_U8: std::snprintf(buf, sizeof buf, "%u", unsigned(as(uint8_t()))); break;
    case KIR_ARG_U16: std::snprintf(buf, sizeof buf, "%u", unsigned(as(uint16_t()))); break;
    case KIR_ARG_U32: std::snprintf(buf, sizeof buf, "%u", as(uint32_t())); break;
    case KIR_ARG_U64: std::snprintf(buf, sizeof buf, "%" PRIu64, as(uint64_t())); break;
    case KIR_ARG_F32: std::snprintf(buf, sizeof buf, "%.9g", double(as(float()))); break;
    case KIR_ARG_F64: std::snprintf(buf, sizeof buf, "%.17g", as(double())); break;
    case KIR_ARG_PTR: std::snprintf(buf, sizeof buf, "0x%" PRIx64, as(uint64_t())); break;
    case KIR_ARG_BOOL: std::snprintf(buf, sizeof buf, "%d", int(as(uint8_t()) != 0)); break;
    default: return "";
  }
  return std::to_string(a.position) + ":" + t + ":" + buf;
}

/// One request to the compile service (python/kir/jit/service.py): a fresh connection
/// (so a forked child never shares its parent's), frames of an 8-byte little-endian
/// length and the bytes: the JSON header, then each IR module; the answer is one frame,
/// "STATUS MESSAGE". false with `error` set when the service cannot be reached or
/// does not answer within `timeout_ms`; `unreachable`: it is not there at all.
bool service_request(const std::string& path, const std::string& header, const std::vector<kir_bytes>& modules,
                     uint64_t timeout_ms, std::string& reply, std::string& error, bool& unreachable) {
  unreachable = false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    error = "socket path too long";
    unreachable = true;
    return false;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  timeval tv{time_t(timeout_ms / 1000), suseconds_t((timeout_ms % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  auto fail = [&](const char* what) {
    error = std::string(what) + ": " + (errno == EAGAIN ? "no answer in time" : std::strerror(errno));
    ::close(fd);
    return false;
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    unreachable = errno == ENOENT || errno == ECONNREFUSED;
    return fail("connect");
  }
  auto send_all = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size) {
      ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);  // a dead service is an error, not SIGPIPE
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n, size -= size_t(n);
    }
    return true;
  };
  auto send_frame = [&](const void* data, size_t size) {
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(size) >> (8 * i));
    return send_all(length, 8) && send_all(data, size);
  };
  if (!send_frame(header.data(), header.size())) return fail("send");
  for (const kir_bytes& m : modules)
    if (!send_frame(m.data, m.size)) return fail("send");
  auto receive = [&](void* data, size_t size) {
    char* p = static_cast<char*>(data);
    while (size) {
      ssize_t n = ::recv(fd, p, size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = EPIPE;
        return false;
      }
      p += n, size -= size_t(n);
    }
    return true;
  };
  unsigned char length[8];
  if (!receive(length, 8)) return fail("receive");
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= uint64_t(length[i]) << (8 * i);
  if (size > 65536) {
    errno = EPROTO;
    return fail("receive");
  }
  reply.resize(size_t(size));
  if (size && !receive(&reply[0], size_t(size))) return fail("receive");
  ::close(fd);
  return true;
}

/// The file holding `stub` (the kernel's host function): dladdr's object, made
/// absolute; the main program as /proc/self/exe names it.
std::string binary_of(const void* stub) {
  Dl_info info{};
  char path[PATH_MAX];
  if (stub && dladdr(stub, &info) && info.dli_fname && info.dli_fname[0] == '/' && realpath(info.dli_fname, path))
    return path;
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "BINARY";
  path[n] = 0;
  return path;
}

std::string hex_bytes(const void* data, size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) out[2 * i] = digits[p[i] >> 4], out[2 * i + 1] = digits[p[i] & 15];
  return out;
}

class JitClient {
 public:
  bool start() {
    if (const char* off = kir::hook::setting("KIR_JIT_DISABLE"); off && *off && std::strcmp(off, "0") != 0) {
      std::fprintf(stderr, "kir-jit: disabled (KIR_JIT_DISABLE=%s): no launch is looked up or claimed\n", off);
      return false;
    }
    const char* dir = kir::hook::setting("KIR_JIT_CACHE");
    if (!dir || !*dir) {
      std::fprintf(stderr, "kir-jit: KIR_JIT_CACHE is not set: no launch is claimed\n");
      return false;
    }
    directory_ = dir;
    kir_cache_options options{};
    options.struct_size = sizeof options;
    options.group = kir::hook::setting("KIR_CACHE_GROUP");
    cache_ = kir_cache_open(dir, &options);
    if (!cache_) {
      std::fprintf(stderr, "kir-jit: error: cache %s: %s\n", dir, kir_last_error());
      return false;
    }
    if (const char* all = kir::hook::setting("KIR_JIT_ALL")) all_kernels_ = std::strcmp(all, "0") != 0 && *all;
    if (!parse_config(kir::hook::setting("KIR_JIT_CONFIG"))) return false;
    if (const char* s = kir::hook::setting("KIR_JIT_SPECIALIZE")) {
      specialize_grid_ = std::strstr(s, "grid") != nullptr;
      specialize_block_ = std::strstr(s, "block") != nullptr;
    }
    if (const char* b = kir::hook::setting("KIR_JIT_BOUNDS"); b && std::strcmp(b, "launch") == 0) {
      bounds_from_launch_ = true;  // Proteus: specializeIR's setLaunchBoundsForKernel(block size, 0)
    } else if (b) {
      unsigned max_threads = 0, min_blocks = 0;
      if (std::sscanf(b, "%u,%u", &max_threads, &min_blocks) < 1) {
        std::fprintf(stderr, "kir-jit: error: KIR_JIT_BOUNDS=%s: expected MAXT[,MINB]\n", b);
        return false;
      }
      max_threads_ = max_threads;
      min_blocks_ = min_blocks;
    }
    if (const char* ms = kir::hook::setting("KIR_JIT_RECHECK_MS"))
      recheck_ns_ = std::strtoull(ms, nullptr, 10) * 1000000ull;
    if (const char* stats = kir::hook::setting("KIR_JIT_STATS")) stats_path_ = stats;
    if (const char* a = kir::hook::setting("KIR_JIT_ARGS")) specialize_args_ = std::strcmp(a, "0") != 0;
    if (const char* service = kir::hook::setting("KIR_JIT_SERVICE"); service && *service) service_ = service;
    if (const char* mode = kir::hook::setting("KIR_JIT_MODE")) {
      if (std::strcmp(mode, "async") != 0 && std::strcmp(mode, "sync") != 0) {
        std::fprintf(stderr, "kir-jit: error: KIR_JIT_MODE=%s: expected sync or async\n", mode);
        return false;
      }
      async_ = std::strcmp(mode, "async") == 0;
    }
    if (const char* ms = kir::hook::setting("KIR_JIT_TIMEOUT_MS")) timeout_ms_ = std::strtoull(ms, nullptr, 10);
    pid_ = ::getpid();
    // Each runtime's entry point, now: for CUDA this loads libcuda.so.1 when nothing has yet
    // (kir_hook_vendor_symbol, as kir_hook_driver_symbol), as this client always did, and the
    // layer's device queries (the launch's arch) find the driver loaded; a process without a
    // runtime finds nothing, and a launch of it would claim nothing.
    for (Runtime& r : runtimes_) r.find();
    return true;
  }

  /// launch_override: claim a launch whose JIT key the cache holds.
  int claim(const kir_hook_launch* l, kir_hook_substitute* out) {
    const kir_hook_kernel* k = l->kernel;
    if (!k || !l->args) return 0;
    uint32_t jit_count = __atomic_load_n(&k->jit_arg_count, __ATOMIC_ACQUIRE);
    if (jit_count == 0 && !all_kernels_) return 0;
    if (!specialize_args_) jit_count = 0;  // the key (and the code) cover no argument value
    ThreadState& t = thread_state;         // the one TLS access of a claim
    Counts::add(kEligible);
    // 1 launch in 256 of each thread is timed: its 2nd, 258th, ... — never its first, which
    // carries one-time costs (the device's arch, the cache's first lookup); nor one that
    // waited for a compile (compile_wait_ns counts those).
    bool timed = (++t.launches & 255) == 2;
    uint64_t start = timed ? now_ns() : 0;
    // The launch's device (hooks.h API 7: the hook fills it, this client not skipping it): CUDA
    // "sm_90" from the context's compute capability; HIP the kernel's code-object target,
    // "gfx942:sramecc+:xnack-" (its features are part of the key, issue 25 §5).
    const char* arch = l->struct_size >= offsetof(kir_hook_launch, context) + sizeof l->context ? l->arch : nullptr;
    if (!arch || !*arch) return 0;
    Runtime& runtime = runtime_of(l);
    // The key is a function of the launch's values gathered here and of this client's
    // fixed settings: a launch of this kernel whose values equal this thread's last
    // one for it has the same key, found by comparing a few bytes instead of encoding
    // and hashing the key again (issue 15). Only scalars (their own bytes) qualify: an
    // argument read from device memory may have changed under the same pointer.
    // The captures of the lambdas the kernel calls (hooks.h API 7; Proteus's
    // jit_variable): CAPTURE records of the key. They are not the launch's own
    // bytes, so a kernel with any is not memoized.
    kir_jit_capture few[16];
    std::vector<kir_jit_capture> many;
    size_t captures = kir_hook_kernel_captures(k, few, 16);
    if (captures > 16) {
      many.resize(captures);
      captures = std::min(captures, kir_hook_kernel_captures(k, many.data(), many.size()));
    }
    KeyMemo probe;
    const bool memoizable = gather(k, jit_count, l, probe) && captures == 0;
    KeyMemo& memo = t.memos[(reinterpret_cast<uintptr_t>(k) >> 4) & (kMemos - 1)];
    const kir_jit_capture* capture_list = many.empty() ? few : many.data();
    kir_hash128 key;
    KeyValues* values = nullptr;  // the values the key hashed, when a miss may compile
    if (memoizable && memo.same_launch(probe, arch)) {
      key = memo.key;
    } else {
      kir_jit_key_input in = key_input(k, jit_count, l, arch, runtime);
      in.captures = capture_list;
      in.capture_count = captures;
      // With a compile service, kir_jit_key also returns the values it hashed (ABI 10):
      // a miss sends them, so an array behind a pointer is read from the device once.
      if (!service_.empty()) values = &key_values;
      if (!(values ? values->key(in, key) : kir_jit_key(&in, &key) == 0)) {
        errors_.fetch_add(1, std::memory_order_relaxed);
        note_error(k, kir_last_error());
        return 0;
      }
      if (memoizable) {
        probe.arch = arch;
        probe.key = key;
        memo = probe;
      }
    }
    int claimed = 0;
    // A key this thread hit before: its entry, with no lock and no cache call (the
    // cache's entries stay valid until it is closed, which this client never does).
    HitSlot& slot = t.hits[(key.low ^ key.high) & (kHitSlots - 1)];
    if (slot.code && slot.key.high == key.high && slot.key.low == key.low) {
      fill(out, key, slot.code, slot.size, slot.kind, slot.arch);
      Counts::add(kHits);
      claimed = 1;
    } else if (!missed_recently(key)) {
      kir_cache_entry entry{};
      entry.struct_size = sizeof entry;
      int found = kir_cache_lookup(cache_, key, &entry);
      if (found == 1 && std::strcmp(entry.arch, arch) == 0) {
        slot = {key, entry.code, entry.code_size, entry.code_kind, entry.arch};
        fill(out, key, entry.code, entry.code_size, entry.code_kind, entry.arch);
        Counts::add(kHits);
        claimed = 1;
      } else if (found < 0) {  // refused (not trusted) or unreadable: the app's own code runs
        failed(key, kir_last_error());
      } else if (miss(key, k, l, arch, runtime, jit_count, {capture_list, captures}, values, timed) &&
                 lookup(key, arch, slot, out)) {
        claimed = 1;  // compiled for this launch (sync)
      }
    } else {
      Counts::add(kMisses);
    }
    if (timed) {
      timed_.fetch_add(1, std::memory_order_relaxed);
      timed_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
    }
    return claimed;
  }

  void finish() {
    uint64_t eligible = Counts::sum(kEligible), hits = Counts::sum(kHits), misses = Counts::sum(kMisses);
    uint64_t timed = timed_.load(), ns = timed_ns_.load();
    double per_launch = timed ? double(ns) / double(timed) : 0.0;
    kir_hook_stats hook{};
    hook.struct_size = sizeof hook;
    kir_hook_get_stats(&hook);
    std::string missed;
    uint64_t not_logged, remembered;
    {
      std::lock_guard<std::mutex> lock(log_mutex_);
      for (const std::string& m : miss_lines_) missed += (missed.empty() ? "" : ",") + m;
      not_logged = not_logged_;
    }
    {
      std::shared_lock<std::shared_mutex> lock(miss_mutex_);
      remembered = missed_.size();
    }
    // A forked child inherited its parent's counts and stats file: it says its own line.
    bool child = ::getpid() != pid_;
    if (!stats_path_.empty() && !child) {
      if (FILE* f = std::fopen(stats_path_.c_str(), "w")) {
        std::fprintf(f,
                     "{\"cache\":%s,\"launches\":%" PRIu64 ",\"hits\":%" PRIu64 ",\"misses\":%" PRIu64
                     ",\"errors\":%" PRIu64 ",\"substituted\":%" PRIu64 ",\"substitute_failures\":%" PRIu64
                     ",\"added_ns_per_launch\":%.1f,\"timed_launches\":%" PRIu64 ",\"not_logged\":%" PRIu64
                     ",\"remembered\":%" PRIu64 ",\"service\":%s,\"mode\":\"%s\",\"compile_requests\":%" PRIu64
                     ",\"compiled\":%" PRIu64 ",\"compile_failures\":%" PRIu64 ",\"queue_full\":%" PRIu64
                     ",\"service_errors\":%" PRIu64 ",\"no_ir\":%" PRIu64
                     ",\"compile_wait_ms\":%.3f,\"missed\":[%s]}\n",
                     kir::json_quoted(directory_).c_str(), eligible, hits, misses, errors_.load(), hook.substituted,
                     hook.substitute_failures, per_launch, timed, not_logged, remembered,
                     service_.empty() ? "null" : kir::json_quoted(service_).c_str(), async_ ? "async" : "sync",
                     requests_.load(), compiled_.load(), compile_failed_.load(), queue_full_.load(),
                     service_errors_.load(), no_ir_.load(), double(compile_wait_ns_.load()) / 1e6, missed.c_str());
        std::fclose(f);
      }
    } else if (eligible) {
      std::fprintf(stderr,
                   "kir-jit:%s %" PRIu64 " launches looked up: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                   " errors, %" PRIu64 " substituted, %" PRIu64 " compiled, %.0f ns added per launch (%s)\n",
                   child ? (" (pid " + std::to_string(::getpid()) + ", forked)").c_str() : "", eligible, hits, misses,
                   errors_.load(), hook.substituted, compiled_.load(), per_launch, directory_.c_str());
    }
  }

 private:
  struct HitSlot {
    kir_hash128 key;
    const void* code;
    size_t size;
    const char* kind;
    const char* arch;
  };
  static constexpr size_t kHitSlots = 64;
  /// A launch's lambda captures (kir_hook_kernel_captures), as its key covers them.
  struct Captures {
    const kir_jit_capture* list;
    size_t count;
  };
  /// The values a key hashed (kir_jit_key_input.values, kir.h ABI 10), per thread: the
  /// storage grows to the largest launch's values and is kept.
  struct KeyValues {
    std::vector<kir_jit_value> values;
    std::vector<unsigned char> bytes;  // kir_jit_key aligns each value's offset to 16 bytes
    uint32_t count = 0;                // values[0..count) are this launch's

    /// kir_jit_key(in) with the values it hashed returned here; false with kir_last_error set.
    bool key(kir_jit_key_input& in, kir_hash128& out) {
      count = 0;
      if (values.size() < in.jit_arg_count) values.resize(in.jit_arg_count);
      if (bytes.empty()) bytes.resize(4096);
      for (int attempt = 0; attempt < 2; ++attempt) {
        size_t needed = 0;
        in.values = values.data();
        in.value_bytes = bytes.data();
        in.value_bytes_capacity = bytes.size();
        in.value_bytes_size = &needed;
        if (kir_jit_key(&in, &out) == 0) {
          count = uint32_t(in.jit_arg_count);
          return true;
        }
        if (needed <= bytes.size()) return false;  // not for want of room: an error (nothing read yet otherwise)
        bytes.resize(needed);
      }
      return false;
    }
  };
  static thread_local KeyValues key_values;
  /// A launch's JIT key with the values it was computed from (the arch, interned by the
  /// hook: one pointer per text; the static hash and the jit_args' address for the
  /// kernel's registration).
  struct KeyMemo {  // trivial, as ThreadState: zero-initialized thread storage, no TLS initializer
    static constexpr size_t kBytes = 64;  ///< scalars' bytes kept; a launch with more is hashed
    const kir_hook_kernel* kernel;
    const char* arch;
    kir_hash128 static_hash;
    const kir_jit_arg* jit_args;
    uint32_t jit_count;
    uint32_t size;  ///< of bytes[]
    size_t shared;
    uint32_t dims[6];  ///< grid and block where the key covers them, else 0
    unsigned char bytes[kBytes];
    kir_hash128 key;

    bool same_launch(const KeyMemo& p, const char* current) const {
      return kernel == p.kernel && arch == current && static_hash.high == p.static_hash.high &&
             static_hash.low == p.static_hash.low && jit_args == p.jit_args && jit_count == p.jit_count &&
             size == p.size && shared == p.shared && std::memcmp(dims, p.dims, sizeof dims) == 0 &&
             std::memcmp(bytes, p.bytes, size) == 0;
    }
  };
  static constexpr size_t kMemos = 16;
  struct ThreadState {        // zero-initialized (thread storage duration)
    uint64_t launches;        ///< this thread's eligible launches (which are timed)
    HitSlot hits[kHitSlots];  ///< keys this thread hit before
    KeyMemo memos[kMemos];    ///< by kernel: the key of its last launch here
  };

  /// What kir_jit_key reads of this launch (docs/hashing.md, "JIT key").
  kir_jit_key_input key_input(const kir_hook_kernel* k, uint32_t jit_count, const kir_hook_launch* l, const char* arch,
                              Runtime& runtime) {
    kir_jit_key_input in{};
    in.struct_size = sizeof in;
    in.static_hash = k->static_hash;
    in.arch = arch;
    in.args = l->args;
    in.param_sizes = k->param_sizes;
    in.param_count = k->param_count;
    in.jit_args = jit_count ? k->jit_args : nullptr;
    in.jit_arg_count = jit_count;
    in.grid[0] = l->grid.x, in.grid[1] = l->grid.y, in.grid[2] = l->grid.z;
    in.block[0] = l->block.x, in.block[1] = l->block.y, in.block[2] = l->block.z;
    in.shared_bytes = l->shared_bytes;
    in.specialize_grid = specialize_grid_;
    in.specialize_block = specialize_block_;
    in.max_threads = max_threads_;
    in.min_blocks = min_blocks_;
    launch_bounds(l, in.max_threads, in.min_blocks);
    in.config_records = runtime.config_records.data();
    in.config_records_size = runtime.config_records.size();
    in.read_memory = &JitClient::read_memory;
    in.user = &runtime;
    return in;
  }

  /// The launch's values that enter its key, into `p`; false when the key reads more
  /// than the launch's own bytes (arrays, objects, too many bytes) or its inputs are
  /// invalid (kir_jit_key reports that).
  bool gather(const kir_hook_kernel* k, uint32_t jit_count, const kir_hook_launch* l, KeyMemo& p) const {
    p.kernel = k;
    p.static_hash = k->static_hash;
    p.jit_args = jit_count ? k->jit_args : nullptr;
    p.jit_count = jit_count;
    p.shared = l->shared_bytes;
    p.dims[0] = specialize_grid_ ? l->grid.x : 0, p.dims[1] = specialize_grid_ ? l->grid.y : 0;
    p.dims[2] = specialize_grid_ ? l->grid.z : 0, p.dims[3] = specialize_block_ ? l->block.x : 0;
    p.dims[4] = specialize_block_ ? l->block.y : 0, p.dims[5] = specialize_block_ ? l->block.z : 0;
    if (bounds_from_launch_) p.dims[3] = l->block.x, p.dims[4] = l->block.y, p.dims[5] = l->block.z;
    p.size = 0;
    for (uint32_t i = 0; i < jit_count; ++i) {
      const kir_jit_arg& a = k->jit_args[i];
      if (a.kind != KIR_JIT_SCALAR || a.position == 0 || a.position > k->param_count) return false;
      const void* value = l->args[a.position - 1];
      size_t size = kir::arg_type_size(a.type);
      if (a.type == KIR_ARG_BYTES) size = k->param_sizes ? k->param_sizes[a.position - 1] : 0;
      if (!value || size == 0 || (k->param_sizes && k->param_sizes[a.position - 1] < size) ||
          size > KeyMemo::kBytes - p.size)
        return false;
      std::memcpy(p.bytes + p.size, value, size);
      p.size += uint32_t(size);
    }
    return true;
  }

  static thread_local ThreadState thread_state;

  static void fill(kir_hook_substitute* out, kir_hash128 key, const void* code, size_t size, const char* kind,
                   const char* arch) {
    out->kind = KIR_SUBSTITUTE_CODE;
    out->code = code;
    out->code_size = size;
    out->code_kind = kind;
    out->arch = arch;
    out->entry = nullptr;  // the launched kernel's name: kir.jit keeps it (docs/jit.md)
    out->id = key;
  }

  bool parse_config(const char* text) {
    if (!text) {  // kir.jit.Options() defaults (docs/jit.md, "The JIT key and the cache entry")
      static const char* const defaults[][2] = {{"opt", "3"},       {"codegen-opt", "3"},   {"ptx", ""},
                                                {"features", ""},   {"kind", "cubin"},      {"assembler-options", ""},
                                                {"kernels", "one"}, {"fp-contract", "auto"}};
      for (const auto& d : defaults) add_config(d[0], d[1]);
      return finish_config();
    }
    std::string s = text;
    for (size_t at = 0; at < s.size();) {
      size_t end = s.find(',', at);
      if (end == std::string::npos) end = s.size();
      std::string item = s.substr(at, end - at);
      at = end + 1;
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || (item.size() - eq - 1) % 2) {
        std::fprintf(stderr, "kir-jit: error: KIR_JIT_CONFIG: item %zu (%s) is not KEY=HEX\n", config_keys_.size() + 1,
                     item.c_str());
        return false;
      }
      std::string value;
      for (size_t i = eq + 1; i < item.size(); i += 2) {
        unsigned byte;
        if (!std::isxdigit(static_cast<unsigned char>(item[i])) ||
            !std::isxdigit(static_cast<unsigned char>(item[i + 1])) ||
            std::sscanf(item.c_str() + i, "%2x", &byte) != 1) {
          std::fprintf(stderr, "kir-jit: error: KIR_JIT_CONFIG: %s: not hexadecimal\n", item.c_str());
          return false;
        }
        value.push_back(char(byte));
      }
      add_config(item.substr(0, eq), value);
    }
    return finish_config();
  }

  void add_config(const std::string& key, const std::string& value) {
    config_keys_.push_back(key);
    config_values_.push_back(value);
  }

  /// Encoded once per runtime: every launch appends these bytes to its key (no per-launch
  /// encoding). A `kind` of "cubin" (the default) is the runtime's default_kind.
  bool finish_config() {
    for (Runtime& r : runtimes_) {
      std::vector<kir_config_item> items;
      for (size_t i = 0; i < config_keys_.size(); ++i) {
        const std::string& value = config_values_[i];
        const bool default_kind = config_keys_[i] == "kind" && value == "cubin";
        items.push_back({config_keys_[i].c_str(), default_kind ? r.default_kind : value.data(),
                         default_kind ? std::strlen(r.default_kind) : value.size()});
      }
      size_t size = kir_jit_config_records(items.data(), items.size(), nullptr, 0);
      r.config_records.resize(size);
      if (size && kir_jit_config_records(items.data(), items.size(), &r.config_records[0], size) != size) {
        std::fprintf(stderr, "kir-jit: error: KIR_JIT_CONFIG: %s\n", kir_last_error());
        return false;
      }
    }
    return true;
  }

  /// The runtime of the launch (hooks.h API 11: kir_hook_launch.vendor; a layer older than
  /// that is CUDA's, as this client was).
  Runtime& runtime_of(const kir_hook_launch* l) {
    const bool known = l->struct_size >= offsetof(kir_hook_launch, vendor) + sizeof l->vendor;
    for (Runtime& r : runtimes_)
      if (r.vendor == (known ? l->vendor : KIR_HOOK_VENDOR_CUDA)) return r;
    return runtimes_[0];
  }

  static int read_memory(void* user, uint64_t address, void* out, size_t size) {
    return static_cast<Runtime*>(user)->read(address, out, size);
  }

  bool missed_recently(const kir_hash128& key) {
    std::shared_lock<std::shared_mutex> lock(miss_mutex_);
    if (missed_.empty()) return false;
    auto it = missed_.find(key);
    return it != missed_.end() && now_ns() < it->second;
  }

  /// Remember that `key` missed (look again after recheck_ns_); true when it was
  /// not remembered. A full set is emptied: its keys are looked up once more.
  bool remember(const kir_hash128& key) {
    std::unique_lock<std::shared_mutex> lock(miss_mutex_);
    auto it = missed_.find(key);
    bool first = it == missed_.end();
    if (first) {
      if (missed_.size() >= kRemembered) missed_.clear();
      it = missed_.emplace(key, 0).first;
    }
    it->second = now_ns() + recheck_ns_;
    return first;
  }

  /// Write `line` to stderr while fewer than kLogLines were written; past them, one
  /// summary line, then only a count (not_logged_). Called with log_mutex_ held.
  bool log_full() const { return logged_ >= kLogLines; }
  void log(const std::string& line) {
    if (log_full()) return unlogged();
    ++logged_;
    std::fputs(line.c_str(), stderr);
  }
  void unlogged() {
    if (not_logged_++ == 0)
      std::fprintf(stderr,
                   "kir-jit: %u lines logged: further misses and errors are counted, not logged (the counters at "
                   "exit count every launch)\n",
                   kLogLines);
  }

  /// A lookup that failed (a refused directory or entry, an unreadable one): one line
  /// per message, counted as an error and a miss; the app's own kernel runs.
  void failed(const kir_hash128& key, const char* message) {
    Counts::add(kMisses);
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (!remember(key)) return;
    std::lock_guard<std::mutex> lock(log_mutex_);
    if (log_full()) unlogged();
    else if (logged_errors_.insert(message).second)  // at most kLogLines messages
      log("kir-jit: error: " + std::string(message) + " (the app's own code runs)\n");
  }

  /// A miss: counted, remembered, logged once per key (the command that fills it) and,
  /// with a compile service, compiled. true when the service stored the code (sync).
  bool miss(const kir_hash128& key, const kir_hook_kernel* k, const kir_hook_launch* l, const char* arch,
            Runtime& runtime, uint32_t jit_count, Captures captures, KeyValues* values, bool& timed) {
    Counts::add(kMisses);
    if (remember(key)) log_miss(key, k, l, arch, jit_count);
    if (service_.empty() || service_gone_.load(std::memory_order_relaxed) || failed_before(key)) return false;
    timed = false;  // a launch that asks for a compile is not a sample of the per-launch cost
    uint64_t started = now_ns();
    bool ready = compile(key, k, l, arch, runtime, jit_count, captures, values);
    compile_wait_ns_.fetch_add(now_ns() - started, std::memory_order_relaxed);
    if (ready) forget(key);
    return ready;
  }

  void log_miss(const kir_hash128& key, const kir_hook_kernel* k, const kir_hook_launch* l, const char* arch,
                uint32_t jit_count) {
    {
      std::lock_guard<std::mutex> lock(log_mutex_);
      if (log_full() && miss_lines_.size() >= kMissRecords) return unlogged();  // nothing to write
    }
    // Once per key: the command that fills it (scalars; arrays and objects are named), on
    // the file that holds the kernel (its host function's object, else the program).
    std::string args, command = "kir jit compile " + binary_of(k->host_stub) + " --kernel " + std::string(k->name) +
                                " --arch " + arch;
    for (size_t i = 0; i < jit_count; ++i) {
      const kir_jit_arg& a = k->jit_args[i];
      const void* value = a.position >= 1 && a.position <= k->param_count ? l->args[a.position - 1] : nullptr;
      std::string text = arg_text(a, value);
      args += (args.empty() ? "" : " ") +
              (text.empty() ? "(argument " + std::to_string(a.position) + ": array or object)" : text);
      if (!text.empty()) command += " --arg " + text;
    }
    if (specialize_grid_)
      command +=
          " --grid " + std::to_string(l->grid.x) + "," + std::to_string(l->grid.y) + "," + std::to_string(l->grid.z);
    if (specialize_block_)
      command += " --block " + std::to_string(l->block.x) + "," + std::to_string(l->block.y) + "," +
                 std::to_string(l->block.z);
    uint32_t max_threads = max_threads_, min_blocks = min_blocks_;
    launch_bounds(l, max_threads, min_blocks);
    if (max_threads) command += " --bounds " + std::to_string(max_threads) + "," + std::to_string(min_blocks);
    if (l->shared_bytes) command += " --shared-bytes " + std::to_string(l->shared_bytes);
    command += " --cache " + directory_;
    std::string key_text = hex(key);
    std::string line = "kir-jit: miss " + std::string(k->name) + " key=" + key_text + " static=" + hex(k->static_hash) +
                       " args=[" + args + "] shared=" + std::to_string(l->shared_bytes) + ": " + command + "\n";
    std::lock_guard<std::mutex> lock(log_mutex_);
    log(line);
    if (miss_lines_.size() < kMissRecords)
      miss_lines_.push_back("{\"kernel\":" + kir::json_quoted(k->name) + ",\"key\":\"" + key_text +
                            "\",\"command\":" + kir::json_quoted(command) + "}");
  }

  /// The launch bounds the key covers: the fixed ones, or the launch's block size.
  void launch_bounds(const kir_hook_launch* l, uint32_t& max_threads, uint32_t& min_blocks) const {
    if (bounds_from_launch_) max_threads = l->block.x * l->block.y * l->block.z, min_blocks = 0;
  }

  /// Ask the compile service for `key`; true when it answered that the cache holds it.
  bool compile(const kir_hash128& key, const kir_hook_kernel* k, const kir_hook_launch* l, const char* arch,
               Runtime& runtime, uint32_t jit_count, Captures captures, KeyValues* values) {
    std::vector<kir_bytes> modules;
    for (size_t i = 0, n = kir_hook_kernel_ir_count(k); i < n; ++i) {
      kir_bytes b{};
      if (kir_hook_kernel_ir(k, i, &b) && b.data && b.size) modules.push_back(b);
    }
    if (modules.empty()) {
      give_up(key, k, "no LLVM IR (the Proteus pass embeds it; kir_hook_kernel_ir): not compiled", no_ir_);
      return false;
    }
    if (!values) {  // a memoized key (scalars only: the launch's own bytes, nothing read from the device)
      values = &key_values;
      kir_jit_key_input in = key_input(k, jit_count, l, arch, runtime);
      in.captures = captures.list;
      in.capture_count = captures.count;
      kir_hash128 again{};
      if (!values->key(in, again) || again.high != key.high || again.low != key.low) {
        give_up(key, k, std::string("its values: ") + (again.high || again.low ? "another key" : kir_last_error()),
                compile_failed_);
        return false;
      }
    }
    // The values kir_jit_key hashed (kir_jit_value): [position, kir_arg_type, hex bytes, kind];
    // kir.jit keys each as the ARG record it was (python/kir/jit/service.py, _specialization).
    std::string args;
    for (uint32_t i = 0; i < values->count; ++i) {
      const kir_jit_value& v = values->values[i];
      args += std::string(args.empty() ? "" : ",") + "[" + std::to_string(v.position) + "," +
              std::to_string(unsigned(v.type)) + ",\"" + hex_bytes(v.bytes, size_t(v.size)) + "\"," +
              std::to_string(unsigned(v.kind)) + "]";
    }
    std::string capture_text;  // the CAPTURE records the key covers: kir.jit's key covers them too
    for (size_t i = 0; i < captures.count; ++i) {
      const kir_jit_capture& c = captures.list[i];
      capture_text += std::string(capture_text.empty() ? "" : ",") + "[" + kir::json_quoted(c.lambda) + "," +
                      std::to_string(c.slot) + "," + std::to_string(c.offset) + "," + std::to_string(unsigned(c.type)) +
                      ",\"" + hex_bytes(c.value, c.size) + "\"]";
    }
    auto dims = [](bool on, const kir_dim3& d) {
      return on ? "[" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + "]"
                : std::string("null");
    };
    uint32_t max_threads = max_threads_, min_blocks = min_blocks_;
    launch_bounds(l, max_threads, min_blocks);
    std::string bounds =
        max_threads ? "[" + std::to_string(max_threads) + "," + std::to_string(min_blocks) + "]" : "null";
    std::string header =
        "{\"protocol\":1,\"key\":\"" + hex(key) + "\",\"kernel\":" + kir::json_quoted(k->name) +
        ",\"arch\":" + kir::json_quoted(arch) + ",\"static_hash\":\"" + hex(k->static_hash) + "\",\"args\":[" + args +
        "],\"captures\":[" + capture_text + "],\"grid\":" + dims(specialize_grid_, l->grid) +
        ",\"block\":" + dims(specialize_block_, l->block) + ",\"bounds\":" + bounds +
        ",\"shared_bytes\":" + std::to_string(l->shared_bytes) + ",\"modules\":" + std::to_string(modules.size()) +
        ",\"wait\":" + (async_ ? "false" : "true") + ",\"pid\":" + std::to_string(::getpid()) + "}";
    requests_.fetch_add(1, std::memory_order_relaxed);
    std::string reply, error;
    bool unreachable = false;
    // async: only the answer "queued" is waited for (the service answers at once)
    if (!service_request(service_, header, modules, async_ ? 10000 : timeout_ms_, reply, error, unreachable)) {
      service_errors_.fetch_add(1, std::memory_order_relaxed);
      if (unreachable) service_gone_.store(true, std::memory_order_relaxed);  // not asked again
      note_service(error + (unreachable ? " (not asked again)" : ""));
      return false;
    }
    std::string status = reply.substr(0, reply.find(' '));
    std::string message = reply.size() > status.size() ? reply.substr(status.size() + 1) : "";
    if (status == "ok") {
      compiled_.fetch_add(1, std::memory_order_relaxed);
      return !async_;
    }
    if (status == "queued" || status == "pending") return false;  // async: a recheck finds it
    if (status == "full") {
      queue_full_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (status == "failed") {
      give_up(key, k, "compile failed: " + message, compile_failed_);
      return false;
    }
    service_errors_.fetch_add(1, std::memory_order_relaxed);
    note_service(reply);
    return false;
  }

  /// `key` is not compiled (again) by this process: counted in `counter`, logged.
  void give_up(const kir_hash128& key, const kir_hook_kernel* k, const std::string& why,
               std::atomic<uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
    {
      std::unique_lock<std::shared_mutex> lock(miss_mutex_);
      if (failed_keys_.size() >= kRemembered) failed_keys_.clear();
      failed_keys_.insert(key);
    }
    std::lock_guard<std::mutex> lock(log_mutex_);
    log("kir-jit: " + std::string(k->name) + " key=" + hex(key) + ": " + why + " (the app's own code runs)\n");
  }

  bool failed_before(const kir_hash128& key) {
    std::shared_lock<std::shared_mutex> lock(miss_mutex_);
    return !failed_keys_.empty() && failed_keys_.count(key);
  }

  void forget(const kir_hash128& key) {
    std::unique_lock<std::shared_mutex> lock(miss_mutex_);
    missed_.erase(key);
  }

  void note_service(const std::string& message) {
    std::lock_guard<std::mutex> lock(log_mutex_);
    if (log_full()) return unlogged();
    if (logged_errors_.insert("service: " + message).second)
      log("kir-jit: error: compile service " + service_ + ": " + message + " (the app's own code runs)\n");
  }

  /// After a compile: the entry, claimed as a hit is.
  bool lookup(const kir_hash128& key, const char* arch, HitSlot& slot, kir_hook_substitute* out) {
    kir_cache_entry entry{};
    entry.struct_size = sizeof entry;
    if (kir_cache_lookup(cache_, key, &entry) != 1 || std::strcmp(entry.arch, arch) != 0) return false;
    slot = {key, entry.code, entry.code_size, entry.code_kind, entry.arch};
    fill(out, key, entry.code, entry.code_size, entry.code_kind, entry.arch);
    return true;
  }

  void note_error(const kir_hook_kernel* k, const char* message) {
    std::lock_guard<std::mutex> lock(log_mutex_);
    log("kir-jit: error: " + std::string(k->name) + ": JIT key: " + message + "\n");
  }

  std::string directory_, stats_path_, service_;
  kir_cache* cache_ = nullptr;
  bool all_kernels_ = false, specialize_grid_ = false, specialize_block_ = false;
  bool specialize_args_ = true, bounds_from_launch_ = false, async_ = false;
  uint64_t timeout_ms_ = 120000;
  pid_t pid_ = 0;  ///< the process that loaded the client (a forked child's differs)
  std::atomic<bool> service_gone_{false};
  std::unordered_set<kir_hash128, KeyHash, KeyEqual> failed_keys_;  ///< not compiled again (miss_mutex_)
  std::atomic<uint64_t> requests_{0}, compiled_{0}, compile_failed_{0}, queue_full_{0}, service_errors_{0}, no_ir_{0},
      compile_wait_ns_{0};
  uint32_t max_threads_ = 0, min_blocks_ = 0;
  uint64_t recheck_ns_ = 1000000000ull;
  std::vector<std::string> config_keys_, config_values_;
  /// The runtimes whose launches are looked up (runtime_of); CUDA's first.
  Runtime runtimes_[2] = {{KIR_HOOK_VENDOR_CUDA, "cuMemcpyDtoH_v2", cuda_copy, "cubin"},
                          {KIR_HOOK_VENDOR_HIP, "hipMemcpyDtoH", hip_copy, "code-object"}};
  std::shared_mutex miss_mutex_;
  std::unordered_map<kir_hash128, uint64_t, KeyHash, KeyEqual> missed_;  // key -> look again after
  static constexpr unsigned kLogLines = 32;    ///< lines about misses and errors, then one summary
  static constexpr size_t kRemembered = 4096;  ///< missed keys remembered at most
  static constexpr size_t kMissRecords = 64;   ///< misses in KIR_JIT_STATS' "missed"
  std::mutex log_mutex_;
  std::vector<std::string> miss_lines_;
  std::unordered_set<std::string> logged_errors_;  ///< failure messages logged (each once)
  unsigned logged_ = 0;
  uint64_t not_logged_ = 0;  ///< lines not written past kLogLines
  std::atomic<uint64_t> errors_{0}, timed_{0}, timed_ns_{0};
  // Counted per launch: per-thread counters, no locked instruction (issue 15).
  struct CountsTag {};
  using Counts = kir::hook::ThreadCounters<CountsTag, 3>;
  enum : size_t { kEligible, kHits, kMisses };
};

thread_local JitClient::ThreadState JitClient::thread_state;
thread_local JitClient::KeyValues JitClient::key_values;

JitClient* the_client = nullptr;

int on_override(void*, const kir_hook_launch* launch, kir_hook_substitute* out) {
  return the_client->claim(launch, out);
}

}  // namespace

extern "C" KIR_JIT_EXPORT const kir_hook_client* kir_hook_client_entry(void) {
  static kir_hook_client disabled = [] {
    kir_hook_client c{};
    c.struct_size = sizeof c;
    c.api_version = KIR_HOOK_API_VERSION;
    return c;
  }();
  static kir_hook_client client = [] {
    kir_hook_client c{};
    c.struct_size = sizeof c;
    c.api_version = KIR_HOOK_API_VERSION;
    c.launch_override = on_override;
    c.launch_skips = KIR_HOOK_SKIP_IDENTITY;  // the JIT key is the client's own: no launch identity needed
    return c;
  }();
  if (the_client) return &client;
  auto* jit = new JitClient;  // lives as long as the process
  if (!jit->start()) return &disabled;
  the_client = jit;
  std::atexit([] { the_client->finish(); });
  return &client;
}
