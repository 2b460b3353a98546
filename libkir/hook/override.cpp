// The launch override (API 4, kir/hooks.h "Launch override"): turning a
// client's claim into a function to launch, and launching it through the
// driver. Substitute code is loaded once per context (CUDA: the current
// CUcontext; HIP: the current device) through the driver's own
// cuModuleLoadData / hipModuleLoadData — the real ones, not the layer's
// interposers, so the layer's registry does not list the client's modules — and
// kept for the process's life, keyed by the client's id.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "interpose.hpp"

namespace kir::hook {

namespace {

/// A driver (or HIP runtime) entry point, kept once found: a runtime may load
/// its driver only at its first call, so a lookup that found nothing is retried.
struct Entry {
  const char* name;
  bool hip;
  std::atomic<void*> found{nullptr};
  Entry(const char* n, bool h) : name(n), hip(h) {}

  template <class F>
  F get() {
    void* f = found.load(std::memory_order_acquire);
    if (f) return reinterpret_cast<F>(f);
    if (!hip) f = vendor_symbol(name, "libcuda.so.1");
    else
      for (const char* lib : {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"})
        if ((f = vendor_symbol(name, lib))) break;
    if (f) found.store(f, std::memory_order_release);
    return reinterpret_cast<F>(f);
  }
};

#define KIR_CUDA(var, type, name) static Entry var##_entry(name, false); const auto var = var##_entry.get<type>()
#define KIR_HIP(var, type, name) static Entry var##_entry(name, true); const auto var = var##_entry.get<type>()

constexpr int kNotFound = 500;  // CUDA_ERROR_NOT_FOUND / hipErrorNotFound

using Launch = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**);
using LaunchEx = int (*)(const void*, void*, void**, void**);
using LaunchCooperative = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                  void**);

/// A loaded substitute: (context or device, id, entry) -> function.
struct ModuleCache {
  std::mutex mutex;
  std::map<std::tuple<const void*, uint64_t, uint64_t, std::string>, void*> functions;
};

ModuleCache& module_cache() {
  static ModuleCache* cache = new ModuleCache();  // never destroyed: launches may come during exit
  return *cache;
}

std::string describe_claim(const kir_hook_launch& launch, const Claim& claim) {
  char id[33];
  kir_hash_to_hex(claim.sub.id, id);
  return "launch of " + std::string(launch.kernel ? launch.kernel->name : "an unregistered kernel") + " (" +
         (launch.api ? launch.api : "?") + "): client " + std::to_string(claim.client) + "'s substitute " + id;
}

bool fail(const kir_hook_launch& launch, const Claim& claim, const std::string& why) {
  report_failure(describe_claim(launch, claim), why + "; the original kernel is launched");
  return false;
}

/// The current CUDA context; for a runtime-API launch, the runtime's primary
/// context made current first when none is (cudaFree(NULL), as the runtime's
/// own lazy initialization does).
void* current_context(Vendor vendor) {
  static Entry get_current("cuCtxGetCurrent", false);
  void* ctx = nullptr;
  auto get = get_current.get<int (*)(void**)>();
  if (get && get(&ctx) == 0 && ctx) return ctx;
  if (vendor != Vendor::cuda_runtime) return nullptr;
  static const auto runtime_free = reinterpret_cast<int (*)(void*)>(dlsym(RTLD_DEFAULT, "cudaFree"));
  if (runtime_free) runtime_free(nullptr);  // loads the driver and makes the primary context current
  get = get_current.get<int (*)(void**)>();
  return get && get(&ctx) == 0 ? ctx : nullptr;
}

/// The code's hash, the cache key of a claim without an id.
kir_hash128 code_identity(const kir_hook_substitute& s) {
  Hash128 h = xxh3_128(ByteView(static_cast<const uint8_t*>(s.code), s.code_size));
  return {h.high, h.low};
}

void* load_code(const kir_hook_launch& launch, const Claim& claim, Vendor vendor) {
  const kir_hook_substitute& s = claim.sub;
  const char* entry = s.entry ? s.entry : launch.kernel ? launch.kernel->name : nullptr;
  bool is_hip = vendor == Vendor::hip;
  const void* where = nullptr;
  if (is_hip) {
    KIR_HIP(get_device, int (*)(int*), "hipGetDevice");
    int device = 0;
    if (!get_device || get_device(&device) != 0) return fail(launch, claim, "hipGetDevice failed"), nullptr;
    where = reinterpret_cast<const void*>(uintptr_t(device) + 1);
  } else if (!(where = current_context(vendor))) {
    return fail(launch, claim, "no current CUDA context"), nullptr;
  }
  // This thread's recent loads first: no lock, no string, no check repeated (issue 15).
  // A slot holds only code that loaded (so passed the checks below) under this id, for
  // this context and entry; the cache's entries live as long as the process.
  struct Recent {
    const void* where;
    uint64_t high, low;
    const char* entry;
    void* function;
  };
  static thread_local Recent recent[8];
  const bool named = s.id.high || s.id.low;
  Recent* slot = named ? &recent[(s.id.low ^ reinterpret_cast<uintptr_t>(where)) & 7] : nullptr;
  if (slot && slot->function && slot->where == where && slot->high == s.id.high && slot->low == s.id.low &&
      slot->entry == entry)
    return slot->function;
  if (!entry || !*entry) return fail(launch, claim, "no entry named, and the launched kernel is unknown"), nullptr;
  if (!s.code || !s.code_size) return fail(launch, claim, "code without bytes"), nullptr;
  const char* kind = s.code_kind ? s.code_kind : "";
  if (is_hip ? std::strcmp(kind, "code-object") != 0
             : std::strcmp(kind, "cubin") != 0 && std::strcmp(kind, "ptx") != 0)
    return fail(launch, claim,
                std::string("code kind \"") + kind + "\" cannot be loaded by the " + (is_hip ? "HIP" : "CUDA") +
                    " runtime (" + (is_hip ? "\"code-object\"" : "\"cubin\" or \"ptx\"") + ")"),
           nullptr;
  kir_hash128 id = named ? s.id : code_identity(s);
  auto key = std::make_tuple(where, id.high, id.low, std::string(entry));
  ModuleCache& cache = module_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);  // also: two threads never load the same code twice
  auto it = cache.functions.find(key);
  if (it != cache.functions.end()) {
    if (slot) *slot = {where, id.high, id.low, entry, it->second};
    return it->second;
  }
  std::string arch = s.arch && *s.arch ? std::string(" ") + s.arch : std::string();
  // PTX must be NUL-terminated for the driver: copy it when it is not.
  std::string text;
  const void* image = s.code;
  if (std::strcmp(kind, "ptx") == 0 && static_cast<const char*>(s.code)[s.code_size - 1] != 0) {
    text.assign(static_cast<const char*>(s.code), s.code_size);
    image = text.c_str();
  }
  void* module = nullptr;
  void* function = nullptr;
  int r;
  if (is_hip) {
    KIR_HIP(load, int (*)(void**, const void*), "hipModuleLoadData");
    KIR_HIP(get, int (*)(void**, void*, const char*), "hipModuleGetFunction");
    if (!load || !get) return fail(launch, claim, "the HIP runtime has no hipModuleLoadData"), nullptr;
    if ((r = load(&module, image)) != 0)
      return fail(launch, claim, std::string("hipModuleLoadData of its ") + kind + arch + " failed: error " +
                                     std::to_string(r)),
             nullptr;
    if ((r = get(&function, module, entry)) != 0)
      return fail(launch, claim, std::string("hipModuleGetFunction(\"") + entry + "\") failed: error " +
                                     std::to_string(r)),
             nullptr;
  } else {
    KIR_CUDA(load, int (*)(void**, const void*), "cuModuleLoadData");
    KIR_CUDA(get, int (*)(void**, void*, const char*), "cuModuleGetFunction");
    if (!load || !get) return fail(launch, claim, "the CUDA driver has no cuModuleLoadData"), nullptr;
    if ((r = load(&module, image)) != 0)
      return fail(launch, claim, std::string("cuModuleLoadData of its ") + kind + arch + " failed: error " +
                                     std::to_string(r)),
             nullptr;
    if ((r = get(&function, module, entry)) != 0)
      return fail(launch, claim, std::string("cuModuleGetFunction(\"") + entry + "\") failed: error " +
                                     std::to_string(r)),
             nullptr;
  }
  Layer::get().count_substitute_load();
  cache.functions.emplace(std::move(key), function);
  if (slot) *slot = {where, id.high, id.low, entry, function};
  return function;
}

}  // namespace

void* substitute_function(const kir_hook_launch& launch, const Claim& claim, Vendor vendor) {
  const kir_hook_substitute& s = claim.sub;
  bool is_hip = vendor == Vendor::hip;
  switch (s.kind) {
    case KIR_SUBSTITUTE_FUNCTION:
    case KIR_SUBSTITUTE_KERNEL:  // cuLaunchKernel takes a CUkernel as a CUfunction (CUDA >= 12)
      if (is_hip) return fail(launch, claim, "a CUDA handle for a HIP launch"), nullptr;
      if (!s.function) return fail(launch, claim, "a NULL function"), nullptr;
      return const_cast<void*>(s.function);
    case KIR_SUBSTITUTE_HIP_FUNCTION:
      if (!is_hip) return fail(launch, claim, "a hipFunction_t for a CUDA launch"), nullptr;
      if (!s.function) return fail(launch, claim, "a NULL function"), nullptr;
      return const_cast<void*>(s.function);
    case KIR_SUBSTITUTE_CODE:
      return load_code(launch, claim, vendor);
    default:
      return fail(launch, claim, "unknown kir_hook_substitute.kind " + std::to_string(s.kind)), nullptr;
  }
}

int driver_launch(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args, void** extra,
                  bool ptsz) {
  KIR_CUDA(plain, Launch, "cuLaunchKernel");
  KIR_CUDA(per_thread, Launch, "cuLaunchKernel_ptsz");
  Launch launch = ptsz && per_thread ? per_thread : plain;
  return launch ? launch(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, stream, args, extra) : kNotFound;
}

int driver_launch_ex(const void* config, void* f, void** args, void** extra, bool ptsz) {
  KIR_CUDA(plain, LaunchEx, "cuLaunchKernelEx");
  KIR_CUDA(per_thread, LaunchEx, "cuLaunchKernelEx_ptsz");
  LaunchEx launch = ptsz && per_thread ? per_thread : plain;
  return launch ? launch(config, f, args, extra) : kNotFound;
}

int driver_launch_cooperative(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args) {
  KIR_CUDA(launch, LaunchCooperative, "cuLaunchCooperativeKernel");
  return launch ? launch(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, stream, args) : kNotFound;
}

int hip_module_launch(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args) {
  KIR_HIP(launch, Launch, "hipModuleLaunchKernel");
  return launch ? launch(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, stream, args, nullptr)
                : kNotFound;
}

}  // namespace kir::hook
