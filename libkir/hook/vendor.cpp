// The vendor traits' dispatch (vendor.hpp) and what the runtimes' readers share.
#include "vendor.hpp"

#include <link.h>

#include <cstring>
#include <mutex>
#include <set>

#include "kir/discover.hpp"

namespace kir::hook {

extern const VendorTraits kCudaTraits;  // vendor_cuda.cpp
extern const VendorTraits kHipTraits;   // vendor_hip.cpp

const VendorTraits& traits(Vendor vendor) { return vendor == Vendor::hip ? kHipTraits : kCudaTraits; }

const VendorTraits* traits_of_hook_vendor(int vendor) {
  for (const VendorTraits* t : {&kCudaTraits, &kHipTraits})
    if (t->hook_vendor == vendor) return t;
  return nullptr;
}

const char* interned(const std::string& text) {
  static std::mutex* mutex = new std::mutex();  // never destroyed: launches may come during exit
  static auto* texts = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(*mutex);
  return texts->insert(text).first->c_str();  // set nodes never move
}

const VendorTraits* traits_of_wrapper(const void* wrapper) {
  uint64_t extent = wrapper ? mapped_extent(wrapper) : 0;
  if (!wrapper || extent < sizeof(uint32_t)) return nullptr;  // kUnknownSize (the heap) is large
  uint32_t magic = 0;
  std::memcpy(&magic, wrapper, sizeof magic);
  for (const VendorTraits* t : {&kCudaTraits, &kHipTraits})
    if (t->wrapper_magic == magic) return t;
  return nullptr;
}

uint64_t mapped_extent(const void* p) {
  struct Search {
    uintptr_t at;
    uint64_t extent;
  } search{reinterpret_cast<uintptr_t>(p), kUnknownSize};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) & ph = info->dlpi_phdr[i];
          uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->at >= start && s->at - start < ph.p_memsz) {
            s->extent = ph.p_memsz - (s->at - start);
            return 1;
          }
        }
        return 0;
      },
      &search);
  return search.extent;
}

}  // namespace kir::hook
