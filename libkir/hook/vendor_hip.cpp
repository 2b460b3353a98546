// The HIP runtime's traits (vendor.hpp): registrations of clang offload
// bundles of AMDGPU code objects, modules the app loads with hipModuleLoadData
// (hip_runtime.cpp), and substitute code loaded through hipModuleLoadData once
// per device.
#include "failure_log.hpp"
#include "image_choice.hpp"
#include "interpose.hpp"
#include "kir/amdgpu/code_object.hpp"
#include "kir/discover.hpp"
#include "kir/hash/hash.hpp"
#include "kir_hook_internal/settings.hpp"
#include "vendor.hpp"

namespace kir::hook {

namespace {

/// The code object launches use among a bundle's `images` (KIR_HOOK_ARCH's gfx
/// processor, else the first one), parsed into `record`; `images` counts the
/// device images. Failures are reported against `what`.
void choose_code_object(const std::vector<Image>& all, FatbinRecord& record, const std::string& what, size_t& images,
                        bool keep_bytes) {
  const char* want = setting("KIR_HOOK_ARCH");
  for (const Image& e : all) {
    if (e.kind == ImageKind::host || e.target.empty()) continue;
    ++images;
    if (record.code || (want && processor(e.target) != want)) continue;
    if (Expected<DeviceCode> code = parse_code_object(e.stored)) {
      record.code = std::move(*code);
      record.code->image_digest = xxh3_128(e.stored);
      record.arch = e.target;
      if (keep_bytes) {  // a module's image: the app may free its copy once loaded
        record.launched_bytes.assign(e.stored.data(), e.stored.data() + e.stored.size());
        record.launched_ready = true;
      }  // a registration's: read again from its live wrapper when asked (registered_code)
    } else {
      report_failure(Failure::image, what, "code object " + (e.id.empty() ? e.target : e.id) + ": ", code.error());
    }
  }
  if (!record.code && images)
    report_failure(Failure::image, what,
                   std::string("no code object could be used") +
                       (want ? " for KIR_HOOK_ARCH=" + std::string(want) : std::string()) + " among its " +
                       std::to_string(images) + ": its kernels' layouts are unknown");
}

/// __hipRegisterFatBinary's `wrapper`, {"HIPF", version, offload bundle}: the
/// code object for KIR_HOOK_ARCH (a gfx processor), else the first one.
std::unique_ptr<FatbinRecord> read_registration(const void* handle, const void* wrapper, const Registry&,
                                                size_t& images) {
  auto record = std::make_unique<FatbinRecord>();
  record->decoded = true;
  std::string what = describe("HIP fatbin", handle);
  images = 0;
  Expected<ContainerSite> b = discover_registered_bundle(wrapper, kUnknownSize, mapped_extent);
  if (!b) report_failure(Failure::registration, what, "registered without its code: ", b.error());
  else choose_code_object(b->images, *record, what, images, false);
  return record;
}

/// The code object a registration's launches use (`record.arch`'s, the one
/// choose_code_object parsed), read again from its live HIPF wrapper — a CCOB bundle
/// decompressed again — on a client's first kir_hook_kernel_code request: the
/// registration keeps only the parsed code, not the bytes (a module's image is
/// copied at load instead: the app may free it).
bool registered_code(const FatbinRecord& record, std::vector<uint8_t>& out, std::string& why) {
  if (!record.wrapper || !record.code) return why = "no code object was chosen at registration", false;
  Expected<ContainerSite> b = discover_registered_bundle(record.wrapper, kUnknownSize, mapped_extent);
  if (!b) return why = b.error().message(), false;
  for (const Image& e : b->images) {
    if (e.kind == ImageKind::host || e.target != record.arch) continue;
    if (record.code->image_digest && xxh3_128(e.stored) != *record.code->image_digest) continue;
    out.assign(e.stored.data(), e.stored.data() + e.stored.size());
    return true;
  }
  return why = "its bundle no longer holds the " + record.arch + " code object", false;
}

/// An image handed to hipModuleLoadData / hipModuleLoadDataEx (or hipModuleLoad's
/// file): a bare AMDGPU code object, or a clang offload bundle, plain or CCOB
/// v2/v3 — what ROCm/clr's FatBinaryInfo::ExtractFatBinary (hipamd/src/hip_fatbin.cpp)
/// accepts — sized from its own headers (kir/discover.hpp, sized_device_image). The
/// chosen code object's bytes are copied: the app may free its buffer.
std::unique_ptr<FatbinRecord> read_module(const void* module, const void* image, size_t& images) {
  auto record = std::make_unique<FatbinRecord>();
  record->decoded = true;
  std::string what = describe("HIP module", module);
  images = 0;
  Expected<ContainerSite> site = sized_device_image(image, image ? mapped_extent(image) : 0);
  const bool bundle = site && site->format == ContainerFormat::offload_bundle;
  const bool code_object =
      site && site->format == ContainerFormat::device_elf && site->images.front().kind == ImageKind::code_object;
  const std::string at = "image at " + hex(reinterpret_cast<uintptr_t>(image));
  if (!site) {
    report_failure(Failure::registration, what, "not recorded with its code: ", site.error().within(at));
  } else if (!bundle && !code_object) {
    report_failure(Failure::registration, what,
                   "not recorded with its code: " + at + " is neither an AMDGPU code object nor an offload bundle");
  } else if (code_object && site->images.front().target.empty()) {  // its notes could not be read: say why
    images = 1;
    Expected<DeviceCode> code = parse_code_object(site->images.front().stored);
    report_failure(Failure::image, what,
                   "code object: ", code ? Error(ErrorCode::malformed, "no target in its metadata") : code.error());
  } else {
    choose_code_object(site->images, *record, what, images, true);
  }
  return record;
}

bool loads(ImageKind kind) { return kind == ImageKind::code_object; }

bool own_handle(int kind) { return kind == KIR_SUBSTITUTE_HIP_FUNCTION; }

constexpr const char* kLibraries[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so",
                                      nullptr};

/// The current HIP device (as 1 + its ordinal: never nullptr).
const void* load_site(Vendor, std::string& why) {
  static DriverEntry get_device_entry("hipGetDevice", kLibraries);
  const auto get_device = get_device_entry.get<int (*)(int*)>();
  int device = 0;
  if (!get_device || get_device(&device) != 0) return why = "hipGetDevice failed", nullptr;
  return reinterpret_cast<const void*>(uintptr_t(device) + 1);
}

void unload(void* module) {
  static DriverEntry unload_entry("hipModuleUnload", kLibraries);
  if (const auto f = unload_entry.get<int (*)(void*)>()) f(module);
}

bool load(const void* image, const char* entry, const std::string& what, void*& module, void*& function,
          std::string& why) {
  static DriverEntry load_entry("hipModuleLoadData", kLibraries), get_entry("hipModuleGetFunction", kLibraries);
  const auto load_data = load_entry.get<int (*)(void**, const void*)>();
  const auto get = get_entry.get<int (*)(void**, void*, const char*)>();
  if (!load_data || !get) return why = "the HIP runtime has no hipModuleLoadData", false;
  module = nullptr;
  int r;
  if ((r = load_data(&module, image)) != 0)
    return why = "hipModuleLoadData of its " + what + " failed: error " + std::to_string(r), false;
  if ((r = get(&function, module, entry)) != 0) {
    unload(module);
    return why = std::string("hipModuleGetFunction(\"") + entry + "\") failed: error " + std::to_string(r), false;
  }
  return true;
}

/// hipFuncSetAttribute(function, hipFuncAttributeMaxDynamicSharedMemorySize, bytes): ROCm's
/// hip/hip_runtime_api.h, enum hipFuncAttribute, hipFuncAttributeMaxDynamicSharedMemorySize = 8
/// (ROCm 5.2 and 6.x alike). Asked for launches over 64 KiB (shared_without_opt_in).
/// AMD GPUs need no opt-in — hipModuleLaunchKernel grants dynamic LDS up to the device's limit —
/// and HIP checks the pointer against the host stubs it registered, which a module's
/// hipFunction_t is not: the call is made as CUDA's is, and its refusal is no failure (the
/// launch itself says whether the memory fits).
bool allow_shared(void* function, int bytes, std::string&) {
  constexpr int kMaxDynamicSharedMemorySize = 8;
  static DriverEntry set_entry("hipFuncSetAttribute", kLibraries);
  if (const auto set = set_entry.get<int (*)(const void*, int, int)>())
    set(function, kMaxDynamicSharedMemorySize, bytes);
  return true;
}

/// hipGetDevice's device (`site` is 1 + its ordinal); the arch is the target of the
/// code object the layer reads for the kernel (HIP has no stable C call naming it:
/// gcnArchName is inside hipDeviceProp_t, whose layout changes between ROCm releases).
void device(const void* site, const std::string* code_arch, int& ordinal, const char*& arch, const void*& context) {
  ordinal = site ? int(reinterpret_cast<uintptr_t>(site) - 1) : -1;
  static thread_local std::string last;  // the last kernel's: one compare per launch, no lock
  static thread_local const char* last_arch = "";
  if (code_arch && *code_arch != last) last_arch = (last = *code_arch).empty() ? "" : interned(last);
  arch = code_arch ? last_arch : "";
  context = nullptr;
}

}  // namespace

namespace {

int launch_function(void* f, const Dim3& grid, const Dim3& block, unsigned shared, void* stream, void** args) {
  return hip_module_launch(f, grid, block, shared, stream, args);
}

/// hipModuleGetGlobal(hipDeviceptr_t* dptr, size_t* bytes, hipModule_t hmod, const char* name)
/// (ROCm hip/hip_runtime_api.h, ROCm 5.2 and 6.x alike): a loaded module's globals (Layer::module_loaded).
int module_global(uint64_t* device, size_t* bytes, const void* module, const char* name) {
  static DriverEntry entry("hipModuleGetGlobal", kLibraries);
  auto get = entry.get<int (*)(uint64_t*, size_t*, const void*, const char*)>();
  return get ? get(device, bytes, module, name) : -1;
}

}  // namespace

extern const VendorTraits kHipTraits;
const VendorTraits kHipTraits = {
    "HIP",
    kLibraries,
    read_registration,
    read_module,
    loads,
    "\"code-object\"",
    own_handle,
    load_site,
    load,
    unload,
    allow_shared,
    device,
    kHipWrapperMagic,
    Vendor::hip,
    "hipLaunchKernel",
    "hipStreamSynchronize",
    "hipLaunchHostFunc",
    "hipGetSymbolAddress",
    launch_function,
    module_global,
    // The LDS a work-group has on gfx9 (MI100/MI200/MI300: 64 KiB; ROCm/clr
    // rocclr/device/rocm/rocdevice.cpp: localMemSizePerCU_ is the agent's group
    // segment size, hipDeviceProp_t::sharedMemPerBlock in hipamd/src/hip_device.cpp).
    64 * 1024,
    registered_code,
    KIR_HOOK_VENDOR_HIP,
};

}  // namespace kir::hook
