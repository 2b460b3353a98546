// Which image of a registration the layer reads (image_choice.hpp).
#include "image_choice.hpp"

#include <dlfcn.h>

namespace kir::hook {

int device_compute_capability() {
  static const int cc = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return 0;
    auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(driver, "cuInit"));
    auto get = reinterpret_cast<int (*)(int*, int)>(dlsym(driver, "cuDeviceGet"));
    auto attribute = reinterpret_cast<int (*)(int*, int, int)>(dlsym(driver, "cuDeviceGetAttribute"));
    constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
    int device = 0, major = 0, minor = 0;
    if (!init || !get || !attribute || init(0) != 0 || get(&device, 0) != 0 || attribute(&major, kMajor, device) != 0 ||
        attribute(&minor, kMinor, device) != 0)
      return 0;
    return major * 10 + minor;
  }();
  return cc;
}

int suitability(const FatbinEntry& e, int cc) {
  bool cubin = e.kind == uint16_t(FatbinEntryKind::cubin);
  int arch = int(e.arch);
  if (cubin && arch == cc) return 3000;
  if (cubin && arch / 10 == cc / 10 && arch < cc) return 2000 + arch;
  if (!cubin && arch <= cc) return 1000 + arch;
  return 0;
}

namespace {

/// Whether `e` is an image the layer reads (a cubin or PTX, not obfuscated) for KIR_HOOK_ARCH=`want`.
bool usable(const FatbinEntry& e, const char* want) {
  bool cubin = e.kind == uint16_t(FatbinEntryKind::cubin), ptx = e.kind == uint16_t(FatbinEntryKind::ptx);
  if ((!cubin && !ptx) || e.obfuscated()) return false;
  return !want || "sm_" + std::to_string(e.arch) == want;
}

/// Without a device: whether `e` beats `best` (a cubin over PTX, then the highest architecture).
bool better_without_device(const FatbinEntry& e, const FatbinEntry* best) {
  bool cubin = e.kind == uint16_t(FatbinEntryKind::cubin);
  return !best || (cubin && best->kind != uint16_t(FatbinEntryKind::cubin)) ||
         (e.kind == best->kind && e.arch > best->arch);
}

}  // namespace

const FatbinEntry* pick_image(const FatbinContainer& container, const char* want, int cc) {
  const FatbinEntry* best = nullptr;
  int best_fit = 0;
  for (const FatbinEntry& e : container.entries()) {
    if (!usable(e, want)) continue;
    if (!cc) {
      if (better_without_device(e, best)) best = &e;
    } else if (int fit = suitability(e, cc); fit > best_fit) {
      best = &e, best_fit = fit;
    }
  }
  return best || !cc ? best : pick_image(container, want, 0);
}

const FatbinEntry* pick_ptx(const FatbinContainer& container, int cc) {
  const FatbinEntry* best = nullptr;
  for (const FatbinEntry& e : container.entries()) {
    if (e.kind != uint16_t(FatbinEntryKind::ptx) || e.obfuscated()) continue;
    if (cc && int(e.arch) > cc) continue;
    if (!best || e.arch > best->arch) best = &e;
  }
  return best;
}

std::string processor(const std::string& target) { return target.substr(0, target.find(':')); }

}  // namespace kir::hook
