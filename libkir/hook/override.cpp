// The launch override (API 4, kir/hooks.h "Launch override"): turning a
// client's claim into a function to launch, and launching it through the
// driver. Substitute code is loaded once per context (CUDA: the current
// CUcontext; HIP: the current device) through the driver's own
// cuModuleLoadData / hipModuleLoadData — the real ones, not the layer's
// interposers, so the layer's registry does not list the client's modules — and
// kept for the process's life, keyed by the client's id. The claiming client
// hears of each load (on_loaded, API 7) before the substitute's first launch;
// a launch with more dynamic shared memory than a function gets without opting
// in (VendorTraits::shared_without_opt_in: CUDA 48 KiB, AMD 64 KiB) raises the
// loaded function's limit first (VendorTraits::allow_shared), as an app does for
// its own kernels with cudaFuncSetAttribute.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "interpose.hpp"
#include "vendor.hpp"

namespace kir::hook {

namespace {

/// The CUDA driver's entry point `var`, found once.
#define KIR_CUDA(var, type, name)                                              \
  static DriverEntry var##_entry(name, traits(Vendor::cuda_driver).libraries); \
  const auto var = var##_entry.get<type>()
#define KIR_HIP(var, type, name)                                       \
  static DriverEntry var##_entry(name, traits(Vendor::hip).libraries); \
  const auto var = var##_entry.get<type>()

constexpr int kNotFound = 500;  // CUDA_ERROR_NOT_FOUND / hipErrorNotFound

using Launch = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**);
using LaunchEx = int (*)(const void*, void*, void**, void**);
using LaunchCooperative = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                  void**);

/// A loaded substitute: (context or device, id, entry) -> function; and the
/// dynamic shared memory each loaded function was allowed (beyond 48 KiB).
struct ModuleCache {
  std::mutex mutex;
  std::map<std::tuple<const void*, uint64_t, uint64_t, std::string>, void*> functions;
  std::map<const void*, size_t> shared_allowed;
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
  report_failure(Failure::substitute, describe_claim(launch, claim), why + "; the original kernel is launched");
  return false;
}

/// The code's hash, the cache key of a claim without an id.
kir_hash128 code_identity(const kir_hook_substitute& s) {
  Hash128 h = xxh3_128(ByteView(static_cast<const uint8_t*>(s.code), s.code_size));
  return {h.high, h.low};
}

/// A claim's substitute code loaded earlier on this thread: no lock, no string,
/// no check repeated (issue 15). A slot holds only code that loaded (so passed
/// the checks of load_code) under this id, for this site and entry; the
/// cache's entries live as long as the process.
struct RecentLoads {
  struct Slot {
    const void* where;
    uint64_t high, low;
    const char* entry;
    void* function;
  };
  Slot slots[8];

  static Slot* slot_for(const kir_hash128& id, const void* where) {
    static thread_local RecentLoads recent;
    if (!id.high && !id.low) return nullptr;  // an unnamed claim is keyed by its bytes' hash: never here
    return &recent.slots[(id.low ^ reinterpret_cast<uintptr_t>(where)) & 7];
  }
  static bool holds(const Slot* s, const void* where, const kir_hash128& id, const char* entry) {
    return s && s->function && s->where == where && s->high == id.high && s->low == id.low && s->entry == entry;
  }
};

/// A CODE substitute's kind: named by `code_kind`, or (API 6) numbered by
/// `image_kind` (KIR_KIND_*, kir.h = ImageKind) when `code_kind` is NULL.
std::optional<ImageKind> substitute_kind(const kir_hook_substitute& s) {
  if (s.code_kind) return image_kind_from_name(s.code_kind);
  if (s.image_kind != KIR_KIND_UNKNOWN && s.image_kind < kImageKinds) return ImageKind(s.image_kind);
  return std::nullopt;
}

/// Why `s`'s code cannot be loaded for `launch` by runtime `t` ("" when it can).
std::string unloadable(const kir_hook_substitute& s, const char* entry, const VendorTraits& t) {
  if (!entry || !*entry) return "no entry named, and the launched kernel is unknown";
  if (!s.code || !s.code_size) return "code without bytes";
  std::optional<ImageKind> k = substitute_kind(s);
  if (!k || !t.loads(*k))
    return (s.code_kind
                ? std::string("code kind \"") + s.code_kind + "\""
                : "image_kind " + std::to_string(s.image_kind) + (k ? std::string(" (") + name(*k) + ")" : "")) +
           " cannot be loaded by the " + t.runtime + " runtime (" + t.loadable + ")";
  return "";
}

/// The image handed to the driver: PTX must be NUL-terminated, so it is copied into `text` when it is not.
const void* loadable_image(const kir_hook_substitute& s, ImageKind kind, std::string& text) {
  if (kind != ImageKind::ptx || static_cast<const char*>(s.code)[s.code_size - 1] == 0) return s.code;
  text.assign(static_cast<const char*>(s.code), s.code_size);
  return text.c_str();
}

void* load_code(const kir_hook_launch& launch, const Claim& claim, Vendor vendor) {
  const VendorTraits& t = traits(vendor);
  const kir_hook_substitute& s = claim.sub;
  const char* entry = s.entry ? s.entry : launch.kernel ? launch.kernel->name : nullptr;
  std::string why;
  const void* where = t.load_site(vendor, why);
  if (!where) return fail(launch, claim, why), nullptr;
  RecentLoads::Slot* slot = RecentLoads::slot_for(s.id, where);
  if (RecentLoads::holds(slot, where, s.id, entry)) return slot->function;
  if (!(why = unloadable(s, entry, t)).empty()) return fail(launch, claim, why), nullptr;
  kir_hash128 id = slot ? s.id : code_identity(s);
  auto key = std::make_tuple(where, id.high, id.low, std::string(entry));
  ModuleCache& cache = module_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);  // also: two threads never load the same code twice
  auto it = cache.functions.find(key);
  if (it != cache.functions.end()) {
    if (slot) *slot = {where, id.high, id.low, entry, it->second};
    return it->second;
  }
  ImageKind kind = *substitute_kind(s);  // unloadable() checked it
  std::string text;
  const void* image = loadable_image(s, kind, text);
  std::string what = std::string(name(kind)) + (s.arch && *s.arch ? std::string(" ") + s.arch : std::string());
  void* module = nullptr;
  void* function = nullptr;
  if (!t.load(image, entry, what, module, function, why)) return fail(launch, claim, why), nullptr;
  // The claimer prepares it (API 7) while the lock keeps every other thread from launching it.
  if (int r = Layer::get().substitute_loaded(claim.client, launch, vendor, where, id, module, function, entry);
      r != 0) {
    t.unload(module);
    return fail(launch, claim, "its client's on_loaded refused it (returned " + std::to_string(r) + ")"), nullptr;
  }
  Layer::get().count_substitute_load();
  cache.functions.emplace(std::move(key), function);
  if (slot) *slot = {where, id.high, id.low, entry, function};
  return function;
}

/// Let `function` (a loaded substitute) run with the launch's dynamic shared memory,
/// over the default limit: raised once per function to the largest size launched.
bool allow_shared(const kir_hook_launch& launch, const Claim& claim, Vendor vendor, void* function) {
  ModuleCache& cache = module_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  size_t& allowed = cache.shared_allowed[function];
  if (allowed >= launch.shared_bytes) return true;
  std::string why;
  if (launch.shared_bytes > size_t(INT32_MAX))
    return fail(launch, claim, std::to_string(launch.shared_bytes) + " bytes of dynamic shared memory");
  if (!traits(vendor).allow_shared(function, int(launch.shared_bytes), why)) return fail(launch, claim, why);
  allowed = launch.shared_bytes;
  return true;
}

/// How a failure line names a substitute handle of kir_hook_substitute.kind `kind`.
const char* handle_name(int kind) { return kind == KIR_SUBSTITUTE_HIP_FUNCTION ? "a hipFunction_t" : "a CUDA handle"; }

}  // namespace

void* substitute_function(const kir_hook_launch& launch, const Claim& claim, Vendor vendor) {
  const kir_hook_substitute& s = claim.sub;
  switch (s.kind) {
    case KIR_SUBSTITUTE_FUNCTION:
    case KIR_SUBSTITUTE_KERNEL:  // cuLaunchKernel takes a CUkernel as a CUfunction (CUDA >= 12)
    case KIR_SUBSTITUTE_HIP_FUNCTION:
      if (!traits(vendor).own_handle(s.kind))
        return fail(launch, claim, std::string(handle_name(s.kind)) + " for a " + traits(vendor).runtime + " launch"),
               nullptr;
      if (!s.function) return fail(launch, claim, "a NULL function"), nullptr;
      return const_cast<void*>(s.function);
    case KIR_SUBSTITUTE_CODE: {
      void* f = load_code(launch, claim, vendor);
      if (f && launch.shared_bytes > traits(vendor).shared_without_opt_in && !allow_shared(launch, claim, vendor, f))
        return nullptr;
      return f;
    }
    default: return fail(launch, claim, "unknown kir_hook_substitute.kind " + std::to_string(s.kind)), nullptr;
  }
}

int driver_launch(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args, void** extra, bool ptsz) {
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

int hip_module_launch_cooperative(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args) {
  KIR_HIP(launch, LaunchCooperative, "hipModuleLaunchCooperativeKernel");
  return launch ? launch(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, stream, args) : kNotFound;
}

int hip_ext_module_launch(void* f, Dim3 grid, Dim3 block, size_t shared, void* stream, void** args, void* start,
                          void* stop, unsigned flags) {
  // hipExtModuleLaunchKernel(hipFunction_t f, uint32_t globalWorkSizeX..Z, uint32_t localWorkSizeX..Z,
  // size_t sharedMemBytes, hipStream_t, void** kernelParams, void** extra, hipEvent_t startEvent,
  // hipEvent_t stopEvent, uint32_t flags) (ROCm hip/hip_ext.h): its grid in work-items.
  using ExtLaunch = int (*)(void*, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, size_t, void*, void**,
                            void**, void*, void*, uint32_t);
  KIR_HIP(c_name, ExtLaunch, "hipExtModuleLaunchKernel");
  KIR_HIP(cxx_name, ExtLaunch,
          "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j");
  ExtLaunch launch = c_name ? c_name : cxx_name;
  if (!launch) return kNotFound;
  return launch(f, grid.x * block.x, grid.y * block.y, grid.z * block.z, block.x, block.y, block.z, shared, stream,
                args, nullptr, start, stop, flags);
}

}  // namespace kir::hook
