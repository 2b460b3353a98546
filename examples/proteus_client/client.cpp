// libproteus_client.so: a Proteus-style JIT written on kir (docs/adopting-proteus.md).
//
// It does at a launch what Proteus's JitEngineDevice::compileAndRun does
// (src/include/proteus/impl/JitEngineDevice.h), but every service that is not the
// specialization itself comes from kir:
//   registration, runtime-constant args  kir_hook_kernel.jit_args (the layer interposes
//                                         the Proteus ABI: __proteus_register_function ...)
//   launch interception                  kir_hook_client.launch_override
//   the device                           kir_hook_launch.arch / context (API 7)
//   IR extraction                        kir_hook_kernel_ir
//   static hash, JIT key, decoded values kir_hook_kernel.static_hash, kir_jit_key with
//                                         kir_jit_key_input.values (API 7 / ABI 10)
//   lambda captures                      kir_hook_kernel_captures (API 7; in the key)
//   the registration's device globals    kir_hook_fatbin_globals (API 7)
//   object cache (memory + disk, shared) kir_cache_lookup / kir_cache_store
//   loading and launching the code       KIR_SUBSTITUTE_CODE (PTX: the driver JITs it)
//   NAME$ptr relinking after the load    kir_hook_client.on_loaded (API 7)
// What stays here is Proteus's CompilationTask (specialize.cpp): arguments and dims to
// constants, launch bounds, globals through NAME$ptr, O3, NVPTX codegen. Compiles are
// synchronous, at the first launch of a key (Proteus's default); a failed compile is
// remembered and the app's own kernel runs.
//
// Settings, Proteus's own knobs where they mean the same (src/include/proteus/impl/Config.h):
//   PROTEUS_DISABLE=1                    claim nothing
//   PROTEUS_CACHE_DIR=DIR                kir's cache directory (default .proteus-kir)
//   PROTEUS_SPECIALIZE_ARGS=0|1          (default 1)
//   PROTEUS_SPECIALIZE_DIMS=0|1          gridDim / blockDim to constants (default 1)
//   PROTEUS_SPECIALIZE_LAUNCH_BOUNDS=0|1 maxntid = the block's size (default 1)
//   PROTEUS_OPT_LEVEL=0..3, PROTEUS_CODEGEN_OPT_LEVEL=0..3 (default 3, 3)
//   PROTEUS_DEBUG_OUTPUT=1               one stderr line per compile
//   PROTEUS_CLIENT_STATS=PATH            at exit, the counters as one JSON object
// At start it declares how it keys (DIR/.jit/clients/proteus-client.json, docs/jit.md
// "Declaring a client"), so `kir tune --jit-cache DIR` stores tuned code under its keys too.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kir/cache.h"
#include "kir/hooks.h"
#include "kir/kir.h"
#include "specialize.hpp"

#define PROTEUS_CLIENT_EXPORT __attribute__((visibility("default")))

namespace {

using proteus_client::Request;
using proteus_client::Result;
using proteus_client::RuntimeConstant;

struct KeyHash {
  size_t operator()(const kir_hash128& k) const { return size_t(k.high ^ (k.low * 0x9e3779b97f4a7c15ull)); }
};
struct KeyEqual {
  bool operator()(const kir_hash128& a, const kir_hash128& b) const { return a.high == b.high && a.low == b.low; }
};

std::string hex(kir_hash128 h) {
  char text[33];
  kir_hash_to_hex(h, text);
  return text;
}

bool flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) != 0 : fallback;
}

unsigned level(const char* name, unsigned fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  unsigned l = unsigned(std::strtoul(v, nullptr, 10));
  return l > 3 ? 3 : l;
}

std::string json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char u[8];
      std::snprintf(u, sizeof u, "\\u%04x", c);
      out += u;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// DIR/.jit/clients/NAME.json (docs/jit.md, "Declaring a client"): `text` written to a
// temporary and renamed into place, every directory opened without following links and
// created 0700, the file 0600 (docs/cache.md's rules; no group-shared cache here).
bool write_descriptor(const std::string& cache_dir, const std::string& name, const std::string& text) {
  int dir = open(cache_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (const char* sub : {".jit", "clients"}) {
    if (dir < 0) return false;
    if (mkdirat(dir, sub, 0700) != 0 && errno != EEXIST) return close(dir), false;
    int next = openat(dir, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    dir = next;
    struct stat st;
    if (dir >= 0 && (fstat(dir, &st) != 0 || (st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)))
      return close(dir), false;  // not trusted: write nothing there
  }
  if (dir < 0) return false;
  std::string tmp = ".tmp-" + name + "-" + std::to_string(getpid());
  int fd = openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && fchmod(fd, 0600) == 0 && write(fd, text.data(), text.size()) == ssize_t(text.size());
  if (fd >= 0) close(fd);
  ok = ok && renameat(dir, tmp.c_str(), dir, (name + ".json").c_str()) == 0;
  if (!ok) unlinkat(dir, tmp.c_str(), 0);
  close(dir);
  return ok;
}

// The driver's own entry points (kir_hook_driver_symbol: never the layer's interposers).
using CUresult = int;
struct Driver {
  CUresult (*module_get_global)(uint64_t*, size_t*, const void*, const char*) = nullptr;
  CUresult (*memcpy_htod)(uint64_t, const void*, size_t) = nullptr;
  bool load() {
    module_get_global = reinterpret_cast<decltype(module_get_global)>(kir_hook_driver_symbol("cuModuleGetGlobal_v2"));
    memcpy_htod = reinterpret_cast<decltype(memcpy_htod)>(kir_hook_driver_symbol("cuMemcpyHtoD_v2"));
    return module_get_global && memcpy_htod;
  }
};

class Client {
 public:
  bool start() {
    if (flag("PROTEUS_DISABLE", false)) return false;
    if (kir_hook_api_version() < 7) {
      std::fprintf(stderr, "proteus-client: the hook layer has API %u, 7 is needed: nothing is claimed\n",
                   kir_hook_api_version());
      return false;
    }
    const char* dir = std::getenv("PROTEUS_CACHE_DIR");
    directory_ = dir && *dir ? dir : ".proteus-kir";
    cache_ = kir_cache_open(directory_.c_str(), nullptr);
    if (!cache_) {
      std::fprintf(stderr, "proteus-client: error: cache %s: %s\n", directory_.c_str(), kir_last_error());
      return false;
    }
    args_ = flag("PROTEUS_SPECIALIZE_ARGS", true);
    dims_ = flag("PROTEUS_SPECIALIZE_DIMS", true);
    bounds_ = flag("PROTEUS_SPECIALIZE_LAUNCH_BOUNDS", true);
    opt_ = level("PROTEUS_OPT_LEVEL", 3);
    codegen_opt_ = level("PROTEUS_CODEGEN_OPT_LEVEL", 3);
    debug_ = flag("PROTEUS_DEBUG_OUTPUT", false);
    if (const char* s = std::getenv("PROTEUS_CLIENT_STATS")) stats_path_ = s;
    // The compile configuration is part of the key (Proteus hashes hashCodeGenConfig and
    // hashRuntimeSpecializationConfig into its HashValue): kir's CONFIG records, encoded once.
    std::string specialize;  // "args,dims,bounds": what the code is specialized on
    for (auto [on, name] : {std::pair<bool, const char*>{args_, "args"}, {dims_, "dims"}, {bounds_, "bounds"}})
      if (on) specialize += (specialize.empty() ? "" : ",") + std::string(name);
    config_values_ = {"proteus-client",     proteus_client::llvm_version(),
                      std::to_string(opt_), std::to_string(codegen_opt_),
                      specialize,           "ptx"};
    static const char* const keys[] = {"producer", "compiler", "opt", "codegen-opt", "specialize", "kind"};
    std::vector<kir_config_item> items;
    for (size_t i = 0; i < config_values_.size(); ++i)
      items.push_back({keys[i], config_values_[i].data(), config_values_[i].size()});
    config_records_.resize(kir_jit_config_records(items.data(), items.size(), nullptr, 0));
    kir_jit_config_records(items.data(), items.size(), config_records_.data(), config_records_.size());
    // The descriptor: the same CONFIG items, and what claim() puts in kir_jit_key_input (the
    // argument values always; the grid with dims, the block with dims or bounds; bounds from
    // the launch's block size).
    std::string text = "{\"format\": \"kir.jit-client/1\", \"name\": \"proteus-client\", \"config\": [";
    for (size_t i = 0; i < config_values_.size(); ++i) {
      std::string value;
      for (unsigned char c : config_values_[i])
        value += "0123456789abcdef"[c >> 4], value += "0123456789abcdef"[c & 15];
      text += std::string(i ? ", " : "") + "[" + json(keys[i]) + ", \"" + value + "\"]";
    }
    text += std::string("], \"specialize\": {\"args\": true, \"grid\": ") + (dims_ ? "true" : "false") +
            ", \"block\": " + (dims_ || bounds_ ? "true" : "false") +
            ", \"bounds\": " + (bounds_ ? "\"launch\"" : "null") + "}, \"kind\": \"ptx\"}\n";
    if (!write_descriptor(directory_, "proteus-client", text))
      std::fprintf(stderr, "proteus-client: warning: %s/.jit/clients/proteus-client.json: not written (%s)\n",
                   directory_.c_str(), std::strerror(errno));
    driver_ok_ = driver_.load();  // needed to relink globals only (on_loaded)
    return true;
  }

  /// launch_override: Proteus's compileAndRun, on kir's services.
  int claim(const kir_hook_launch* l, kir_hook_substitute* out) {
    const kir_hook_kernel* k = l->kernel;
    if (!k || !l->args || l->struct_size < offsetof(kir_hook_launch, context) + sizeof l->context) return 0;
    uint32_t jit_count = __atomic_load_n(&k->jit_arg_count, __ATOMIC_ACQUIRE);
    if (jit_count == 0 || !l->arch || !*l->arch) return 0;
    count(launches_);
    // The key and the values it hashed, read once (kir_jit_key, ABI 10).
    std::vector<kir_jit_value> values(jit_count);
    thread_local std::vector<unsigned char> value_bytes(4096);
    std::vector<kir_jit_capture> captures(kir_hook_kernel_captures(k, nullptr, 0));
    if (!captures.empty()) captures.resize(kir_hook_kernel_captures(k, captures.data(), captures.size()));
    kir_jit_key_input in{};
    in.struct_size = sizeof in;
    in.static_hash = k->static_hash;
    in.arch = l->arch;
    in.args = l->args;
    in.param_sizes = k->param_sizes;
    in.param_count = k->param_count;
    in.jit_args = k->jit_args;
    in.jit_arg_count = jit_count;
    in.grid[0] = l->grid.x, in.grid[1] = l->grid.y, in.grid[2] = l->grid.z;
    in.block[0] = l->block.x, in.block[1] = l->block.y, in.block[2] = l->block.z;
    in.shared_bytes = l->shared_bytes;
    in.specialize_grid = dims_;
    in.specialize_block = dims_ || bounds_;
    in.max_threads = bounds_ ? block_threads(l) : 0;
    in.config_records = config_records_.data();
    in.config_records_size = config_records_.size();
    in.read_memory = &Client::read_memory;
    in.user = this;
    in.captures = captures.data();
    in.capture_count = captures.size();
    in.values = values.data();
    in.value_bytes = value_bytes.data();
    in.value_bytes_capacity = value_bytes.size();
    size_t needed = 0;
    in.value_bytes_size = &needed;
    kir_hash128 key;
    int status = kir_jit_key(&in, &key);
    if (status != 0 && kir_last_error_code() == KIR_ERROR_TOO_LARGE && needed > value_bytes.size()) {
      value_bytes.resize(needed);
      in.value_bytes = value_bytes.data();
      in.value_bytes_capacity = value_bytes.size();
      status = kir_jit_key(&in, &key);
    }
    if (status != 0) return error(k, std::string("JIT key: ") + kir_last_error());
    kir_cache_entry entry{};
    entry.struct_size = sizeof entry;
    int found = kir_cache_lookup(cache_, key, &entry);
    if (found < 0) return error(k, std::string("cache: ") + kir_last_error());
    if (found == 1) {
      count(hits_);
      remember_relinked(key, entry);
    } else {
      if (!compile(k, l, key, values, jit_count) || kir_cache_lookup(cache_, key, &entry) != 1) return 0;
    }
    if (std::strcmp(entry.arch, l->arch) != 0) return error(k, "cached code for " + std::string(entry.arch));
    out->kind = KIR_SUBSTITUTE_CODE;
    out->code = entry.code;
    out->code_size = entry.code_size;
    out->code_kind = nullptr;
    out->image_kind = KIR_KIND_PTX;  // the driver compiles it for the device, and caches that itself
    out->arch = entry.arch;
    out->entry = nullptr;  // the kernel keeps its name in the specialized module
    out->id = key;
    count(claims_);
    return 1;
  }

  /// on_loaded: write each relinked global's NAME$ptr in the loaded module with the
  /// address of the app's own variable (Proteus getKernelFunctionFromImage, relink by
  /// copy, CoreDeviceCUDA.h); non-zero refuses the module (the original runs).
  int loaded(const kir_hook_loaded* loaded) {
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = relinked_.find(loaded->id);
      if (it != relinked_.end()) names = it->second;
    }
    if (names.empty()) return 0;
    if (!loaded->kernel) return 1;
    if (!driver_ok_) {
      std::fprintf(stderr,
                   "proteus-client: error: %s: the driver lacks cuModuleGetGlobal_v2 or cuMemcpyHtoD_v2: %s "
                   "cannot be relinked\n",
                   loaded->kernel->name, names[0].c_str());
      return 1;
    }
    std::vector<const kir_hook_global*> globals(kir_hook_fatbin_globals(loaded->kernel->fatbin, nullptr, 0));
    globals.resize(kir_hook_fatbin_globals(loaded->kernel->fatbin, globals.data(), globals.size()));
    for (const std::string& name : names) {
      const kir_hook_global* g = nullptr;
      for (const kir_hook_global* candidate : globals)
        if (name == candidate->name) g = candidate;
      uint64_t address = g ? kir_hook_global_device_address(g->host_address) : 0;
      uint64_t slot = 0;
      size_t size = 0;
      std::string symbol = name + "$ptr";
      if (!address || driver_.module_get_global(&slot, &size, loaded->module, symbol.c_str()) != 0 ||
          size != sizeof address || driver_.memcpy_htod(slot, &address, sizeof address) != 0) {
        std::fprintf(stderr, "proteus-client: error: %s: %s cannot be relinked (device address 0x%" PRIx64 ")\n",
                     loaded->kernel->name, symbol.c_str(), address);
        return 1;
      }
      count(relinked_writes_);
      if (debug_)
        std::fprintf(stderr, "proteus-client: %s: %s = 0x%" PRIx64 "\n", loaded->kernel->name, symbol.c_str(), address);
    }
    return 0;
  }

  void finish() {
    if (stats_path_.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::string compiled;
    for (const std::string& c : compiled_) compiled += (compiled.empty() ? "" : ",") + c;
    if (FILE* f = std::fopen(stats_path_.c_str(), "w")) {
      std::fprintf(f,
                   "{\"cache\":%s,\"launches\":%" PRIu64 ",\"claims\":%" PRIu64 ",\"hits\":%" PRIu64
                   ",\"compiles\":%" PRIu64 ",\"compile_failures\":%" PRIu64 ",\"errors\":%" PRIu64
                   ",\"relinked_writes\":%" PRIu64 ",\"compiled\":[%s]}\n",
                   json(directory_).c_str(), launches_, claims_, hits_, compiles_, compile_failures_, errors_,
                   relinked_writes_, compiled.c_str());
      std::fclose(f);
    }
  }

 private:
  static uint32_t block_threads(const kir_hook_launch* l) { return l->block.x * l->block.y * l->block.z; }

  void count(uint64_t& counter) { __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED); }

  int error(const kir_hook_kernel* k, const std::string& message) {
    count(errors_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (logged_.insert(message).second)
      std::fprintf(stderr, "proteus-client: error: %s: %s\n", k->name, message.c_str());
    return 0;
  }

  void remember_relinked(const kir_hash128& key, const kir_cache_entry& entry) {
    std::vector<std::string> names;
    for (size_t i = 0; i < entry.meta_count; ++i)
      if (std::strcmp(entry.meta[i].key, "relinked-globals") == 0) {
        std::string list = entry.meta[i].value;
        for (size_t at = 0; at < list.size();) {
          size_t end = list.find(',', at);
          if (end == std::string::npos) end = list.size();
          if (end > at) names.push_back(list.substr(at, end - at));
          at = end + 1;
        }
      }
    std::lock_guard<std::mutex> lock(mutex_);
    relinked_[key] = std::move(names);
  }

  /// A miss: specialize the kernel's IR for this launch and store the PTX in kir's cache
  /// (Proteus CompilerSync::compile, then CacheChain->store). One compile at a time; a
  /// key that failed is not compiled again.
  bool compile(const kir_hook_kernel* k, const kir_hook_launch* l, const kir_hash128& key,
               const std::vector<kir_jit_value>& values, uint32_t jit_count) {
    std::lock_guard<std::mutex> compiling(compile_mutex_);
    kir_cache_entry entry{};
    entry.struct_size = sizeof entry;
    if (kir_cache_lookup(cache_, key, &entry) == 1) return true;  // another thread compiled it
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_.count(key)) return false;
    }
    Request r;
    for (size_t i = 0, n = kir_hook_kernel_ir_count(k); i < n; ++i) {
      kir_bytes ir;
      if (kir_hook_kernel_ir(k, i, &ir)) r.modules.emplace_back(ir.data, ir.size);
    }
    r.kernel = k->name;
    r.arch = l->arch;
    for (uint32_t i = 0; i < jit_count; ++i) {
      const kir_jit_value& v = values[i];
      RuntimeConstant rc;
      rc.position = v.position;
      rc.kind = v.kind;
      rc.type = v.type;
      rc.by_value = !v.from_memory;
      rc.bytes.assign(static_cast<const unsigned char*>(v.bytes), static_cast<const unsigned char*>(v.bytes) + v.size);
      r.constants.push_back(std::move(rc));
    }
    r.specialize_args = args_;
    r.specialize_dims = dims_;
    r.specialize_launch_bounds = bounds_;
    r.grid[0] = l->grid.x, r.grid[1] = l->grid.y, r.grid[2] = l->grid.z;
    r.block[0] = l->block.x, r.block[1] = l->block.y, r.block[2] = l->block.z;
    std::vector<const kir_hook_global*> globals(kir_hook_fatbin_globals(k->fatbin, nullptr, 0));
    globals.resize(kir_hook_fatbin_globals(k->fatbin, globals.data(), globals.size()));
    for (const kir_hook_global* g : globals) r.globals.push_back(g->name);
    r.opt_level = opt_;
    r.codegen_opt_level = codegen_opt_;
    Result result;
    auto start = std::chrono::steady_clock::now();
    bool ok = proteus_client::specialize_and_compile(r, result);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!ok) {
      count(compile_failures_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        failed_.insert(key);
      }
      error(k, "compile: " + result.error + " (the app's own kernel runs)");
      return false;
    }
    std::string relinked;
    for (const std::string& name : result.relinked) relinked += (relinked.empty() ? "" : ",") + name;
    std::string key_text = hex(key);
    const kir_cache_meta meta[] = {{"producer", "proteus-client"},
                                   {"kernel", k->name},
                                   {"compiler", proteus_client::llvm_version()},
                                   {"relinked-globals", relinked.c_str()}};
    kir_cache_entry store{};
    store.struct_size = sizeof store;
    store.code = result.ptx.data();
    store.code_size = result.ptx.size();
    store.code_kind = "ptx";
    store.arch = l->arch;
    store.meta = meta;
    store.meta_count = sizeof meta / sizeof meta[0];
    if (kir_cache_store(cache_, key, &store) != 0) {
      error(k, std::string("cache store: ") + kir_last_error());
      return false;
    }
    count(compiles_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      relinked_[key] = result.relinked;
      compiled_.push_back("{\"kernel\":" + json(k->name) + ",\"key\":\"" + key_text +
                          "\",\"ms\":" + std::to_string(ms) + ",\"relinked\":" + json(relinked) + "}");
    }
    if (debug_)
      std::fprintf(stderr, "proteus-client: compiled %s key=%s in %.1f ms (%zu bytes of PTX)\n", k->name,
                   key_text.c_str(), ms, result.ptx.size());
    return true;
  }

  static int read_memory(void*, uint64_t address, void* out, size_t size) {
    using Copy = CUresult (*)(void*, uint64_t, size_t);
    static const auto copy = reinterpret_cast<Copy>(kir_hook_driver_symbol("cuMemcpyDtoH_v2"));
    return copy && copy(out, address, size) == 0 ? 0 : -1;
  }

  std::string directory_, stats_path_;
  kir_cache* cache_ = nullptr;
  bool args_ = true, dims_ = true, bounds_ = true, debug_ = false;
  unsigned opt_ = 3, codegen_opt_ = 3;
  std::vector<std::string> config_values_;
  std::string config_records_;
  Driver driver_;
  bool driver_ok_ = false;
  std::mutex mutex_, compile_mutex_;
  std::unordered_map<kir_hash128, std::vector<std::string>, KeyHash, KeyEqual> relinked_;
  std::unordered_set<kir_hash128, KeyHash, KeyEqual> failed_;
  std::unordered_set<std::string> logged_;
  std::vector<std::string> compiled_;
  uint64_t launches_ = 0, claims_ = 0, hits_ = 0, compiles_ = 0, compile_failures_ = 0, errors_ = 0,
           relinked_writes_ = 0;
};

Client* the_client = nullptr;

int on_override(void*, const kir_hook_launch* launch, kir_hook_substitute* out) {
  return the_client->claim(launch, out);
}
int on_loaded(void*, const kir_hook_loaded* loaded) { return the_client->loaded(loaded); }

}  // namespace

extern "C" PROTEUS_CLIENT_EXPORT const kir_hook_client* kir_hook_client_entry(void) {
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
    c.on_loaded = on_loaded;
    c.launch_skips = KIR_HOOK_SKIP_IDENTITY;  // the key is the client's: no launch identity
    return c;
  }();
  if (the_client) return &client;
  auto* c = new Client;  // lives as long as the process
  if (!c->start()) return &disabled;
  the_client = c;
  std::atexit([] { the_client->finish(); });
  return &client;
}
