// The driver's front door, for runtimes the layer cannot interpose by name.
//
// A CUDA runtime linked statically into an app or a library (nvcc's default,
// CMake's CUDA language, libcublasLt, libcufft ...) defines its own
// __cudaRegisterFatBinary and cudaLaunchKernel, so no preload sees them. It
// reaches the driver through one door: it dlopen()s libcuda.so.1, looks up
// `cuGetProcAddress_v2` with dlsym() on that handle, and asks that function for
// every other entry point — cuGetProcAddress itself included (versions 11030 and
// 12000, measured on CUDA 13.0 / driver 580). A lookup by handle bypasses
// LD_PRELOAD, so the layer interposes dlsym() and hands out its own
// cuGetProcAddress at both points; that one returns the layer's driver
// interposers (driver_api.cpp), which report module loads, kernels, allocations
// and launches. Calls a shared runtime makes the same way arrive inside an
// interposed runtime call and are only forwarded (RuntimeCall), so nothing is
// reported twice.
//
// Libraries without a CUDA runtime reach the driver by handle too, one entry
// point at a time: cuFFT (libcufft.so.12, CUDA 13) dlopen()s libcuda and
// dlsym()s cuLaunchKernel, cuModuleLoadData ... directly (measured on the H200:
// its launches reached the driver while the layer saw none). A lookup by handle
// of a name the layer interposes, whose answer is the driver's own function
// (found in libcuda.so), gets the layer's interposer instead.
//
// glibc's dlsym() resolves RTLD_NEXT (and scopes RTLD_DEFAULT) relative to the
// object that called it, found from its return address. The interposer must
// therefore not be a C function that calls the real dlsym: it is a few lines of
// x86-64 assembly that asks `kir_dlsym_override` whether to answer, and
// otherwise *jumps* to the real dlsym with the caller's registers and return
// address untouched, so every other lookup behaves exactly as without the layer.
// Elsewhere (other architectures) dlsym is not interposed and statically linked
// runtimes stay invisible.
#include <dlfcn.h>

#include "interpose.hpp"

extern "C" {
// driver_api.cpp: the layer's cuGetProcAddress, in both ABI versions.
int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
int cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags);
// Where the interposer jumps when it does not answer (defined below).
extern __attribute__((visibility("hidden"))) void* kir_real_dlsym;
}

namespace {

/// The real dlsym: a versioned lookup, which the interposer does not affect.
/// No function-local static (its guard is intercepted by sanitizer runtimes,
/// which call dlsym before they are ready): callers cache it in kir_real_dlsym.
void* lookup_real_dlsym() {
  void* f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");  // glibc >= 2.34: in libc
  if (!f) f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  return f;
}

}  // namespace

/// What the interposer answers itself (non-null), or nullptr to let the real
/// dlsym answer. Only lookups of the driver's cuGetProcAddress by handle are
/// taken: the layer hands out its own, which forwards to the driver's.
namespace {

/// `name` equals `literal` (no libc call: a sanitizer runtime looks functions up
/// with dlsym before it can intercept anything, this one included).
bool same(const char* name, const char* literal) {
  for (; *literal; ++name, ++literal)
    if (*name != *literal) return false;
  return *name == 0;
}

/// Whether the file name of `path` (after its last '/') starts with `prefix` (no
/// libc call: this runs inside dlsym, possibly before a sanitizer is ready).
bool file_name_starts(const char* path, const char* prefix) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  for (; *prefix; ++base, ++prefix)
    if (*base != *prefix) return false;
  return true;
}

/// Whether `caller` lies in a shared CUDA runtime (libcudart.so*): the layer
/// interposes its API by name, and the driver calls it makes on the app's behalf
/// are its own business (dlsym by handle of the driver then answers as without
/// the layer).
bool from_shared_runtime(const void* caller) {
  Dl_info info;
  return caller && dladdr(caller, &info) && info.dli_fname && file_name_starts(info.dli_fname, "libcudart.so");
}

/// Whether `path` names the driver library (a file called libcuda.so*).
bool in_libcuda(const char* path) { return file_name_starts(path, "libcuda.so"); }

/// Whether `p` (code or data) lies in the HIP runtime (a file called libamdhip64.so*).
bool in_libamdhip64(const void* p) {
  Dl_info info;
  return p && dladdr(p, &info) && info.dli_fname && file_name_starts(info.dli_fname, "libamdhip64.so");
}

/// HIP's front doors, as the driver's above: a lookup by handle of a name the layer
/// interposes (hipGetProcAddress among them) whose answer is the HIP runtime's own
/// function gets the layer's interposer — unless the runtime asks itself (ROCm/clr's
/// hipGetProcAddress looks its answer up with dlsym: hipamd/src/hip_device.cpp),
/// whose answer the layer's hipGetProcAddress replaces (hip_runtime.cpp).
void* hip_override(void* handle, const char* name, const void* caller) {
  void* ours = kir::hook::hip_interposer(name);
  if (!ours || in_libamdhip64(caller)) return nullptr;
  void* found = kir::hook::real_dlsym(handle, name);
  return found && found != ours && in_libamdhip64(found) ? ours : nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("hidden"), used)) void* kir_dlsym_override(void* handle, const char* name,
                                                                                const void* caller) {
  if (!name || handle == RTLD_NEXT || handle == RTLD_DEFAULT) return nullptr;
  if (same(name, "cuGetProcAddress_v2")) return reinterpret_cast<void*>(&cuGetProcAddress_v2);
  if (same(name, "cuGetProcAddress")) return reinterpret_cast<void*>(&cuGetProcAddress);
  if (name[0] == 'h' && name[1] == 'i' && name[2] == 'p' && kir_real_dlsym) return hip_override(handle, name, caller);
  if (name[0] == 'c' && name[1] == 'u' && kir_real_dlsym && !from_shared_runtime(caller)) {
    void* ours = kir::hook::driver_interposer(name);
    if (!ours) {
      kir::hook::log_driver_lookup("dlsym", name, false);
      return nullptr;
    }
    void* found = kir::hook::real_dlsym(handle, name);
    Dl_info info;
    if (found && found != ours && dladdr(found, &info) && info.dli_fname && in_libcuda(info.dli_fname)) {
      kir::hook::log_driver_lookup("dlsym", name, true);
      return ours;
    }
  } else if (name[0] == 'c' && name[1] == 'u' && kir_real_dlsym && !from_shared_runtime(caller)) {
    kir::hook::log_driver_lookup("dlsym", name, false);
  }
  return nullptr;
}

/// Where the interposer jumps when it does not answer (set before main).
extern "C" {
__attribute__((visibility("hidden"), used)) void* kir_real_dlsym = nullptr;
}

namespace {
__attribute__((constructor(101))) void find_real_dlsym() {
  if (!kir_real_dlsym) kir_real_dlsym = lookup_real_dlsym();
}
}  // namespace

void* kir::hook::real_dlsym(void* handle, const char* name) {
  using Dlsym = void* (*)(void*, const char*);
  if (!kir_real_dlsym) kir_real_dlsym = lookup_real_dlsym();
  return reinterpret_cast<Dlsym>(kir_real_dlsym)(handle, name);
}

#if defined(__x86_64__)
// dlsym(handle, name): rdi, rsi; the override also gets the caller's return
// address (rdx). Entry rsp is 8 mod 16; two pushes and 8 bytes re-align it for the call. When the override answers,
// return it; else restore the arguments and tail-jump to the real dlsym (the caller's return address is still on top of
// the stack). Before the constructor ran, ask the real one via the PLT-free path: kir_real_dlsym is resolved lazily by
// the override's caller.
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    mov (%rsp), %rdx
    push %rdi
    push %rsi
    sub $8, %rsp
    call kir_dlsym_override
    add $8, %rsp
    pop %rsi
    pop %rdi
    test %rax, %rax
    jz 1f
    ret
1:
    mov kir_real_dlsym(%rip), %rax
    test %rax, %rax
    jz 2f
    jmp *%rax
2:
    push %rdi
    push %rsi
    sub $8, %rsp
    call kir_find_real_dlsym
    add $8, %rsp
    pop %rsi
    pop %rdi
    jmp *%rax
    .size dlsym, .-dlsym
)");

extern "C" __attribute__((visibility("hidden"), used)) void* kir_find_real_dlsym() {
  kir_real_dlsym = lookup_real_dlsym();
  return kir_real_dlsym;
}
#endif

extern "C" KIR_EXPORT void* kir_hook_driver_symbol(const char* name) {
  if (!name) return nullptr;
  if (void* f = kir::hook::vendor_symbol(name, "libcuda.so.1")) return f;
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);  // not loaded yet: load it for the client
  return lib ? kir::hook::real_dlsym(lib, name) : nullptr;
}

extern "C" KIR_EXPORT void* kir_hook_vendor_symbol(int vendor, const char* name) {
  if (vendor == KIR_HOOK_VENDOR_CUDA) return kir_hook_driver_symbol(name);  // it loads libcuda.so.1 if need be
  const kir::hook::VendorTraits* t = kir::hook::traits_of_hook_vendor(vendor);
  if (!t || !name) return nullptr;
  for (const char* const* lib = t->libraries; *lib; ++lib)
    if (void* f = kir::hook::vendor_symbol(name, *lib)) return f;
  return nullptr;
}
