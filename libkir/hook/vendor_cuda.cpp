// The CUDA runtime's and driver's traits (vendor.hpp): fatbin registrations
// (and device-linked ones), driver-loaded modules, the image chosen for
// launches, and substitute code loaded through cuModuleLoadData.
#include <cstring>

#include "failure_log.hpp"
#include "image_choice.hpp"
#include "interpose.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/discover.hpp"
#include "kir/hash/hash.hpp"
#include "kir/support/compression.hpp"
#include "kir_hook_internal/settings.hpp"
#include "vendor.hpp"

namespace kir::hook {

namespace {

std::string hex_of(const void* p) { return hex(reinterpret_cast<uintptr_t>(p)); }

/// The fatbin container a `__fatBinC_Wrapper_t` points to, as a view of the app's
/// memory, sized from its own header (kir/discover.hpp) and read no further
/// than the loaded segment holding it.
Expected<FatbinContainer> container_of(const void* wrapper) {
  return registered_fatbin(wrapper, kUnknownSize, mapped_extent);
}

/// The most relocatable units a device-linked registration may list.
constexpr size_t kMaxLinkedUnits = 4096;

/// A device-linked registration's units (nvcc -rdc=true): __cudaRegisterLinkedBinary
/// registers the linked fatbin with a version-2 `__fatBinC_Wrapper_t` whose last
/// field points to a NULL-terminated array of the units' relocatable fatbin
/// containers (crt/link.stub, `__cudaPrelinkedFatbins`). Each is read no
/// further than its loaded segment; one that cannot be read is reported and
/// kept as an empty unit, so indices stay those of the link order.
std::vector<FatbinRecord::Unit> linked_units(const void* wrapper, const void* handle) {
  std::vector<FatbinRecord::Unit> units;
  constexpr size_t kVersionAt = 4, kListAt = 16, kWrapperBytes = 24;
  if (!wrapper || mapped_extent(wrapper) < kWrapperBytes) return units;
  int32_t version = 0;
  const void* list = nullptr;
  std::memcpy(&version, static_cast<const uint8_t*>(wrapper) + kVersionAt, sizeof version);
  std::memcpy(&list, static_cast<const uint8_t*>(wrapper) + kListAt, sizeof list);
  if (version != 2 || !list) return units;
  const auto* slots = static_cast<const uint8_t*>(list);
  const std::string what = describe("fatbin", handle);
  for (size_t i = 0;; ++i) {
    if (i == kMaxLinkedUnits) {
      report_failure(Failure::registration, what,
                     "its list of linked units at " + hex_of(list) + " holds more than " +
                         std::to_string(kMaxLinkedUnits) + " entries: the rest are ignored");
      break;
    }
    const uint8_t* slot = slots + i * sizeof(void*);
    if (mapped_extent(slot) < sizeof(void*)) {
      report_failure(
          Failure::registration, what,
          "its list of linked units at " + hex_of(list) + " ends at entry " + std::to_string(i) + " without a NULL");
      break;
    }
    const void* unit = nullptr;
    std::memcpy(&unit, slot, sizeof unit);
    if (!unit) break;
    FatbinRecord::Unit u;
    Expected<FatbinContainer> c = FatbinContainer::create(
        ByteView(static_cast<const uint8_t*>(unit), std::min(kUnknownSize, mapped_extent(unit))));
    if (c) u.container = std::move(*c);
    else
      report_failure(Failure::registration, what, "linked unit " + std::to_string(i) + " at " + hex_of(unit) + ": ",
                     c.error());
    units.push_back(std::move(u));
  }
  return units;
}

std::unique_ptr<FatbinRecord> read_registration(const void* handle, const void* wrapper, const Registry& registry,
                                                size_t& images) {
  Expected<FatbinContainer> c = container_of(wrapper);
  // Registered again (Proteus's __proteus_register_fatbinary after the runtime's): the same image.
  if (c && registry.holds_image(handle, c->bytes().data())) return nullptr;
  auto record = std::make_unique<FatbinRecord>();
  if (c) {
    record->container = std::move(*c);
    record->units = linked_units(wrapper, handle);
  } else {
    report_failure(Failure::registration, describe("fatbin", handle), "registered without its code: ", c.error());
  }
  images = record->container ? record->container->entries().size() : 0;
  return record;
}

/// The bytes of an image handed to cuModuleLoadData, sized from its own headers:
/// a fatbin container (or the `__fatBinC_Wrapper_t` pointing to one, as a
/// statically linked runtime passes it), an ELF cubin, or PTX text.
Expected<ByteView> sized_image(const void* image) {
  uint32_t magic = 0;
  if (image) std::memcpy(&magic, image, sizeof magic);
  if (magic == kFatbinWrapperMagic) {  // a static runtime hands the driver its __fatBinC_Wrapper_t
    Expected<FatbinContainer> c = registered_fatbin(image, kUnknownSize, mapped_extent);
    if (!c) return c.error();
    return c->bytes();
  }
  Expected<ContainerSite> site = sized_device_image(image, image ? mapped_extent(image) : 0);
  if (!site) return site.error().within("image at " + hex_of(image));
  return ByteView(static_cast<const uint8_t*>(image), site->size);
}

/// A bare cubin or PTX image loaded as a module: parsed at once, its bytes kept.
void read_bare_image(FatbinRecord& record, ByteView bytes, const std::string& what) {
  record.decoded = true;
  bool elf = bytes.starts_with(
      "\x7f"
      "ELF");
  Expected<DeviceCode> code = elf ? parse_cubin(bytes) : parse_ptx(bytes);
  if (!code) {
    report_failure(Failure::image, what, elf ? "cubin: " : "PTX: ", code.error());
    return;
  }
  record.code = std::move(*code);
  record.code->image_digest = xxh3_128(bytes);
  // The image's own architecture (a fatbin entry's is in its header): a cubin's
  // e_flags; PTX text loads for any device (its .target is the minimum), so none.
  // Without it an NVRTC-compiled kernel is recorded for "" and replay refuses it.
  if (elf) record.arch = cubin_arch(bytes);
  record.launched_bytes.assign(bytes.data(), bytes.data() + bytes.size());  // the app may free its copy
  record.launched_ready = true;
}

std::unique_ptr<FatbinRecord> read_module(const void* module, const void* image, size_t& images) {
  auto record = std::make_unique<FatbinRecord>();
  std::string what = describe("module", module);
  Expected<ByteView> sized = sized_image(image);
  ByteView bytes = sized ? *sized : ByteView();
  if (!sized) report_failure(Failure::registration, what, "not recorded with its code: ", sized.error());
  if (FatbinContainer::has_magic(bytes)) {
    record->owned.assign(bytes.data(), bytes.data() + bytes.size());  // the app may free its copy
    if (Expected<FatbinContainer> c = FatbinContainer::create(ByteView(record->owned.data(), record->owned.size())))
      record->container = std::move(*c);
    decode_fatbin(*record, module);
  } else if (!bytes.empty()) {
    read_bare_image(*record, bytes, what);
  }
  images = record->container ? record->container->entries().size() : record->code ? 1 : 0;
  return record;
}

bool loads(ImageKind kind) { return kind == ImageKind::cubin || kind == ImageKind::ptx; }

bool own_handle(int kind) { return kind == KIR_SUBSTITUTE_FUNCTION || kind == KIR_SUBSTITUTE_KERNEL; }

constexpr const char* kLibraries[] = {"libcuda.so.1", nullptr};

/// The current CUDA context; for a runtime-API launch, the runtime's primary
/// context made current first when none is (cudaFree(NULL), as the runtime's
/// own lazy initialization does).
const void* load_site(Vendor vendor, std::string& why) {
  static DriverEntry get_current("cuCtxGetCurrent", kLibraries);
  void* ctx = nullptr;
  auto get = get_current.get<int (*)(void**)>();
  if (get && get(&ctx) == 0 && ctx) return ctx;
  if (vendor == Vendor::cuda_runtime) {
    static const auto runtime_free = reinterpret_cast<int (*)(void*)>(dlsym(RTLD_DEFAULT, "cudaFree"));
    if (runtime_free) runtime_free(nullptr);  // loads the driver and makes the primary context current
    get = get_current.get<int (*)(void**)>();
    if (get && get(&ctx) == 0 && ctx) return ctx;
  }
  why = "no current CUDA context";
  return nullptr;
}

void unload(void* module) {
  static DriverEntry unload_entry("cuModuleUnload", kLibraries);
  if (const auto f = unload_entry.get<int (*)(void*)>()) f(module);
}

bool load(const void* image, const char* entry, const std::string& what, void*& module, void*& function,
          std::string& why) {
  static DriverEntry load_entry("cuModuleLoadData", kLibraries), get_entry("cuModuleGetFunction", kLibraries);
  const auto load_data = load_entry.get<int (*)(void**, const void*)>();
  const auto get = get_entry.get<int (*)(void**, void*, const char*)>();
  if (!load_data || !get) return why = "the CUDA driver has no cuModuleLoadData", false;
  module = nullptr;
  int r;
  if ((r = load_data(&module, image)) != 0)
    return why = "cuModuleLoadData of its " + what + " failed: error " + std::to_string(r), false;
  if ((r = get(&function, module, entry)) != 0) {
    unload(module);
    return why = std::string("cuModuleGetFunction(\"") + entry + "\") failed: error " + std::to_string(r), false;
  }
  return true;
}

/// cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes): CUDA's cuda.h,
/// enum CUfunction_attribute, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8. Without it the
/// driver refuses a launch with more than 48 KiB of dynamic shared memory (CUDA_ERROR_INVALID_VALUE).
bool allow_shared(void* function, int bytes, std::string& why) {
  constexpr int kMaxDynamicSharedSizeBytes = 8;
  static DriverEntry set_entry("cuFuncSetAttribute", kLibraries);
  const auto set = set_entry.get<int (*)(void*, int, int)>();
  if (!set) return why = "the CUDA driver has no cuFuncSetAttribute", false;
  if (int r = set(function, kMaxDynamicSharedSizeBytes, bytes); r != 0)
    return why = "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(bytes) + ") failed: error " +
                 std::to_string(r),
           false;
  return true;
}

/// The context's device: cuCtxGetDevice (the current context is `site`), its
/// compute capability (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76, cuda.h).
/// Remembered per thread for the last context: one driver call per launch.
void device(const void* site, const std::string*, int& ordinal, const char*& arch, const void*& context) {
  struct Last {
    const void* context = nullptr;
    int ordinal = -1;
    const char* arch = "";
  };
  static thread_local Last last;
  context = site;
  if (site != last.context) {
    static DriverEntry get_device("cuCtxGetDevice", kLibraries), attribute_entry("cuDeviceGetAttribute", kLibraries);
    const auto get = get_device.get<int (*)(int*)>();
    const auto attribute = attribute_entry.get<int (*)(int*, int, int)>();
    int d = -1, major = 0, minor = 0;
    last = {site, -1, ""};
    if (get && get(&d) == 0) {
      last.ordinal = d;
      if (attribute && attribute(&major, 75, d) == 0 && attribute(&minor, 76, d) == 0)
        last.arch = interned("sm_" + std::to_string(major) + std::to_string(minor));
    }
  }
  ordinal = last.ordinal;
  arch = last.arch;
}

}  // namespace

void decode_fatbin(FatbinRecord& f, const void* handle) {
  f.decoded = true;
  if (!f.container) return;  // reported when it was registered
  const char* want = setting("KIR_HOOK_ARCH");
  const FatbinEntry* best = pick_image(*f.container, want, want ? 0 : device_compute_capability());
  const std::string what = describe("fatbin", handle);
  if (!best) {
    report_failure(Failure::image, what,
                   "no cubin or PTX image" + (want ? " for KIR_HOOK_ARCH=" + std::string(want) : std::string()) +
                       " among its " + std::to_string(f.container->entries().size()) +
                       " entries: its kernels' layouts are unknown");
    return;
  }
  bool ptx = best->kind == uint16_t(FatbinEntryKind::ptx);
  std::string which = std::string(name(ptx ? ImageKind::ptx : ImageKind::cubin)) + " sm_" + std::to_string(best->arch);
  Scratch scratch;
  Expected<ByteView> bytes = decode_image(*best, scratch);
  if (!bytes) return report_failure(Failure::image, what, which + ": ", bytes.error());
  Expected<DeviceCode> code = ptx ? parse_ptx(*bytes) : parse_cubin(*bytes);
  if (!code) return report_failure(Failure::image, what, which + ": ", code.error());
  f.code = std::move(*code);
  f.code->image_digest = xxh3_128(*bytes);
  f.chosen = best;
  f.arch = "sm_" + std::to_string(best->arch);
}

namespace {

int launch_function(void* f, const Dim3& grid, const Dim3& block, unsigned shared, void* stream, void** args) {
  return driver_launch(f, grid, block, shared, stream, args, nullptr, false);
}

/// cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name)
/// (cuda.h; the _v2 entry point, which `cuModuleGetGlobal` names since CUDA 3.2).
int module_global(uint64_t* device, size_t* bytes, const void* module, const char* name) {
  static DriverEntry entry("cuModuleGetGlobal_v2", kLibraries);
  auto get = entry.get<int (*)(uint64_t*, size_t*, const void*, const char*)>();
  return get ? get(device, bytes, module, name) : -1;
}

}  // namespace

extern const VendorTraits kCudaTraits;
const VendorTraits kCudaTraits = {
    "CUDA",
    kLibraries,
    read_registration,
    read_module,
    loads,
    "\"cubin\" or \"ptx\"",
    own_handle,
    load_site,
    load,
    unload,
    allow_shared,
    device,
    kFatbinWrapperMagic,
    Vendor::cuda_runtime,
    "cudaLaunchKernel",
    "cudaStreamSynchronize",
    "cudaLaunchHostFunc",
    "cudaGetSymbolAddress",
    launch_function,
    module_global,
    48 * 1024,  // cudaFuncAttributeMaxDynamicSharedMemorySize's default
    nullptr,    // the registration's container serves the launched image (kernel_code.cpp)
    KIR_HOOK_VENDOR_CUDA,
};

}  // namespace kir::hook
