"""The stub CUDA runtime and driver (libcudart.so / libcuda.so.1 written here: registrations
succeed, every launch that reaches them prints one line naming the entry point, the
function and its arguments), the app that launches the fixture kernel axpy through every
path the hook layer interposes, and the C hook clients of tests/hook/test_hook_override.py
(`rig`). Shared by the hook, JIT-client and kernel-pattern tests and benchmarks/launch_path.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import kir
from build import rpath  # tests/support/build.py (conftest puts it on the path)


HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
INCLUDE = Path(kir.__file__).parent / "include"
AXPY = "_Z4axpyfPKfPfi"
STUB_COMMON = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned x, y, z; } dim3;
"""


# The runtime: registration is accepted, launches print and return 0.
STUB_RUNTIME = STUB_COMMON + r"""
static void* handles[16]; static int n;
void** __cudaRegisterFatBinary(void* w) { (void)w; return &handles[n++ % 16]; }
void __cudaRegisterFatBinaryEnd(void** h) { (void)h; }
void __cudaUnregisterFatBinary(void** h) { (void)h; }
void __cudaRegisterFunction(void** h, const char* f, char* df, const char* dn, int tl, void* a, void* b, void* c,
                            void* d, int* e) { (void)h; (void)f; (void)df; (void)dn; (void)tl; (void)a; (void)b;
                            (void)c; (void)d; (void)e; }
static int launched(const char* api, const void* f, dim3 g, dim3 b, void** args) {
  printf("stub %s stub=%p grid=%u block=%u a=%g\n", api, f, g.x, b.x, args ? *(float*)args[0] : -1.0);
  return 0;
}
int cudaLaunchKernel(const void* f, dim3 g, dim3 b, void** args, size_t s, void* st) {
  (void)s; (void)st; return launched("cudaLaunchKernel", f, g, b, args); }
int cudaLaunchKernel_ptsz(const void* f, dim3 g, dim3 b, void** args, size_t s, void* st) {
  (void)s; (void)st; return launched("cudaLaunchKernel_ptsz", f, g, b, args); }
int cudaLaunchCooperativeKernel(const void* f, dim3 g, dim3 b, void** args, size_t s, void* st) {
  (void)s; (void)st; return launched("cudaLaunchCooperativeKernel", f, g, b, args); }
/* CUDA 13's <<<>>>: a kernel handle for the stub, then launches by the handle. */
static char kernel_handle;
int __cudaGetKernel(void** k, const void* stub) { (void)stub; *k = &kernel_handle; return 0; }
int __cudaLaunchKernel(void* k, dim3 g, dim3 b, void** args, size_t s, void* st) {
  (void)s; (void)st; return launched("__cudaLaunchKernel", k, g, b, args); }
int __cudaLaunchKernel_ptsz(void* k, dim3 g, dim3 b, void** args, size_t s, void* st) {
  (void)s; (void)st; return launched("__cudaLaunchKernel_ptsz", k, g, b, args); }
typedef struct { dim3 g, b; size_t shared; void* stream; void* attrs; unsigned n; } rt_config;
int cudaLaunchKernelExC(const rt_config* c, const void* f, void** args) {
  return launched("cudaLaunchKernelExC", f, c->g, c->b, args); }
int cudaStreamSynchronize(void* s) { (void)s; return 0; }
int cudaLaunchHostFunc(void* s, void (*fn)(void*), void* d) { (void)s; fn(d); return 0; }
int cudaGetSymbolAddress(void** d, const void* h) { (void)d; (void)h; return 1; }
int cudaFree(void* p) { (void)p; return 0; }
"""


# The driver: no device (cuInit fails: the hook picks the highest cubin), one
# context, modules counted; handles are addresses of named slots.
STUB_DRIVER = STUB_COMMON + r"""
static int loads;
static struct fn { char name[128]; } fns[32]; static int nfns;
static char module_marker;
static void report(void) { fprintf(stderr, "stub-driver cuModuleLoadData=%d\n", loads); }
int cuInit(unsigned f) { (void)f; atexit(report); return 100; }
int cuDeviceGet(int* d, int o) { (void)d; (void)o; return 100; }
int cuDeviceGetAttribute(int* v, int a, int d) { (void)v; (void)a; (void)d; return 100; }
int cuCtxGetCurrent(void** c) { *c = getenv("STUB_NO_CONTEXT") ? 0 : (void*)0xC0; return 0; }
int cuModuleLoadData(void** m, const void* image) {
  ++loads;
  /* a cubin, or PTX text (NUL-terminated, as the driver reads it) */
  if (memcmp(image, "\x7f" "ELF", 4) != 0 && !strstr((const char*)image, ".version")) return 200; /* INVALID_IMAGE */
  *m = &module_marker; return 0;
}
int cuModuleGetFunction(void** f, void* m, const char* name) {
  (void)m; snprintf(fns[nfns].name, sizeof fns[nfns].name, "%s", name); *f = &fns[nfns++]; return 0; }
static const char* fn_name(void* f) {
  for (int i = 0; i < nfns; ++i) if (f == &fns[i]) return fns[i].name;
  static char text[32]; snprintf(text, sizeof text, "%p", f); return text;
}
static int launched(const char* api, void* f, unsigned gx, unsigned bx, unsigned shared, void* stream, void** p) {
  printf("stub %s f=%s grid=%u block=%u shared=%u stream=%p a=%g\n", api, fn_name(f), gx, bx, shared, stream,
         p ? *(float*)p[0] : -1.0);
  return 0;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned sh, void* st, void** p, void** e) {
  (void)gy; (void)gz; (void)by; (void)bz; (void)e; return launched("cuLaunchKernel", f, gx, bx, sh, st, p); }
int cuLaunchKernel_ptsz(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void* st, void** p, void** e) {
  (void)gy; (void)gz; (void)by; (void)bz; (void)e; return launched("cuLaunchKernel_ptsz", f, gx, bx, sh, st, p); }
int cuLaunchCooperativeKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned sh, void* st, void** p) {
  (void)gy; (void)gz; (void)by; (void)bz; return launched("cuLaunchCooperativeKernel", f, gx, bx, sh, st, p); }
typedef struct { unsigned gx, gy, gz, bx, by, bz, shared; void* stream; void* attrs; unsigned n; } config;
int cuLaunchKernelEx(const config* c, void* f, void** p, void** e) {
  (void)e; return launched("cuLaunchKernelEx", f, c->gx, c->bx, c->shared, c->stream, p); }
int cuStreamSynchronize(void* s) { (void)s; return 0; }
int cuLaunchHostFunc(void* s, void (*fn)(void*), void* d) { (void)s; fn(d); return 0; }
static int lookup(const char* s, void** pfn) {
  if (!strcmp(s, "cuLaunchKernel")) { *pfn = (void*)cuLaunchKernel; return 0; }
  *pfn = 0; return 500;
}
int cuGetProcAddress_v2(const char* s, void** pfn, int v, unsigned long long f, int* st) {
  (void)v; (void)f; if (st) *st = 0; return lookup(s, pfn); }
int cuGetProcAddress(const char* s, void** pfn, int v, unsigned long long f) { (void)v; (void)f; return lookup(s, pfn); }
"""


# An app of the stub runtime that launches AXPY by its host stub (tests/test_hook_counts.py,
# benchmarks/launch_path.py): the declarations it calls, slurp(path) and the stub.
APP_PRELUDE = STUB_COMMON + r"""
void** __cudaRegisterFatBinary(void*);
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, void*, void*, void*, void*, int*);
int cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, void*);
static void* slurp(const char* path) {
  FILE* f = fopen(path, "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  void* p = malloc(n + 1); if (fread(p, 1, n, f) != (size_t)n) exit(9); fclose(f); ((char*)p)[n] = 0; return p;
}
static char axpy_stub;  /* the host stub's address is the kernel's identity */
"""


# Compiled in with -include: the stubs' printing compiled out (launch counts of thousands).
QUIET = "#include <stdio.h>\n#define printf(...) ((void)0)\n#define fprintf(...) ((void)0)\n"


# The app: argv[1] a fatbin (registered with the runtime), argv[2] a cubin (loaded
# through the driver); argv[3] which launches, one letter each.
APP = APP_PRELUDE + r"""
#define _GNU_SOURCE
#include <dlfcn.h>
int cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, void*);
int cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, void*);
int __cudaGetKernel(void**, const void*);
int __cudaLaunchKernel(void*, dim3, dim3, void**, size_t, void*);
int __cudaLaunchKernel_ptsz(void*, dim3, dim3, void**, size_t, void*);
typedef struct { dim3 g, b; size_t shared; void* stream; void* attrs; unsigned n; } rt_config;
int cudaLaunchKernelExC(const rt_config*, const void*, void**);
int cuModuleLoadData(void**, const void*);
int cuModuleGetFunction(void**, void*, const char*);
int cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
typedef struct { unsigned gx, gy, gz, bx, by, bz, shared; void* stream; void* attrs; unsigned n; } config;
int cuLaunchKernelEx(const config*, void*, void**, void**);
int main(int argc, char** argv) {
  struct { int magic, version; const void* data; void* filename; } wrapper = {0x466243b1, 1, slurp(argv[1]), 0};
  void** h = __cudaRegisterFatBinary(&wrapper);
  __cudaRegisterFunction(h, &axpy_stub, (char*)"AXPY", "AXPY", -1, 0, 0, 0, 0, 0);
  void* module = 0; void* f = 0;
  cuModuleLoadData(&module, slurp(argv[2]));
  cuModuleGetFunction(&f, module, "AXPY");
  float a = 2.5f; const float* x = 0; float* y = 0; int n = 64;
  void* args[] = {&a, &x, &y, &n};
  dim3 g = {4, 1, 1}, b = {32, 1, 1};
  for (const char* c = argv[3]; *c; ++c, a += 1.0f) {
    int r = -1;
    switch (*c) {
      case 'r': r = cudaLaunchKernel(&axpy_stub, g, b, args, 16, (void*)0x5); break;
      case 'p': r = cudaLaunchKernel_ptsz(&axpy_stub, g, b, args, 16, (void*)0x5); break;
      case 'c': r = cudaLaunchCooperativeKernel(&axpy_stub, g, b, args, 16, (void*)0x5); break;
      case 'k': case 'K': {  /* <<<>>> as nvcc 13 compiles it */
        void* k = 0; __cudaGetKernel(&k, &axpy_stub);
        r = *c == 'k' ? __cudaLaunchKernel(k, g, b, args, 16, (void*)0x5) : __cudaLaunchKernel_ptsz(k, g, b, args, 16, (void*)0x5);
        break;
      }
      case 'e': { rt_config cfg = {g, b, 16, (void*)0x5, 0, 0}; r = cudaLaunchKernelExC(&cfg, &axpy_stub, args); break; }
      case 'd': r = cuLaunchKernel(f, 4, 1, 1, 32, 1, 1, 16, (void*)0x5, args, 0); break;
      case 'x': { config cfg = {4, 1, 1, 32, 1, 1, 16, (void*)0x5, 0, 0}; r = cuLaunchKernelEx(&cfg, f, args, 0); break; }
      case 'g': {  /* as a statically linked runtime reaches the driver */
        void* drv = dlopen("libcuda.so.1", RTLD_NOW);
        int (*gpa)(const char*, void**, int, unsigned long long, int*) =
            (int (*)(const char*, void**, int, unsigned long long, int*))dlsym(drv, "cuGetProcAddress_v2");
        void* launch = 0; int st;
        gpa("cuLaunchKernel", &launch, 12000, 0, &st);
        r = ((int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                      void**))launch)(f, 4, 1, 1, 32, 1, 1, 16, (void*)0x5, args, 0);
        break;
      }
      case 'P': {  /* the Proteus launch ABI, without the Proteus runtime */
        int (*pl)(const void*, dim3, dim3, void**, size_t, void*) =
            (int (*)(const void*, dim3, dim3, void**, size_t, void*))dlsym(RTLD_DEFAULT, "__proteus_launch_kernel");
        r = pl(&axpy_stub, g, b, args, 16, (void*)0x5);
        break;
      }
    }
    printf("app %c returned %d\n", *c, r);
  }
  return 0;
}
"""
CLIENT = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kir/hooks.h>
/* NAME: the client's label; CLAIM: whether it ever claims; V3: a struct that ends
   where API 3's did, followed by a function that must never be called. */
static int poison(void* u, const kir_hook_launch* l, kir_hook_substitute* s) {
  (void)u; (void)l; (void)s; printf(NAME " POISON called\n"); abort(); }
static void begin(void* u, const kir_hook_launch* l) {
  (void)u; printf(NAME " begin %s outcome=%d claimed_by=%d\n", l->api, V3 ? -9 : l->outcome, V3 ? -9 : l->claimed_by); }
static void completed(void* u, const kir_hook_launch* l) {
  (void)u;
  if (V3) { printf(NAME " completed %s result=%d\n", l->api, l->result); return; }
  printf(NAME " completed %s result=%d outcome=%d claimed_by=%d id=%llx:%llx\n", l->api, l->result, l->outcome,
         l->claimed_by, (unsigned long long)l->substitute_id.high, (unsigned long long)l->substitute_id.low);
}
static int claim(void* u, const kir_hook_launch* l, kir_hook_substitute* s) {
  (void)u;
  const char* mode = getenv(NAME "_MODE");
  if (!mode || !strcmp(mode, "none")) return 0;
  printf(NAME " asked %s kernel=%s sized=%d\n", l->api, l->kernel ? l->kernel->name : "-",
         s->struct_size == sizeof *s && s->kind == 0 && s->code == 0);  /* zeroed, the layer's size */
  s->id.high = 0x1d; s->id.low = 0x2e;
  if (!strcmp(mode, "handled")) { s->kind = KIR_SUBSTITUTE_HANDLED; s->result = 77; return 1; }
  if (!strcmp(mode, "function")) { s->kind = KIR_SUBSTITUTE_FUNCTION; s->function = (void*)0xF00D; return 1; }
  if (!strcmp(mode, "kernel")) { s->kind = KIR_SUBSTITUTE_KERNEL; s->function = (void*)0xBEEF; return 1; }
  if (!strcmp(mode, "code") || !strcmp(mode, "ptx")) {
    kir_hook_code code;
    if (!l->kernel || !kir_hook_kernel_code(l->kernel, strcmp(mode, "ptx") ? KIR_CODE_LAUNCHED : KIR_CODE_PTX, &code))
      return 0;
    s->kind = KIR_SUBSTITUTE_CODE; s->code = code.bytes; s->code_size = code.size; s->code_kind = code.kind;
    s->arch = code.arch; s->entry = getenv(NAME "_ENTRY");
    return 1;
  }
  if (!strcmp(mode, "bad-code")) {
    s->kind = KIR_SUBSTITUTE_CODE; s->code = "not an image"; s->code_size = 12; s->code_kind = "cubin"; return 1; }
  if (!strcmp(mode, "hip")) { s->kind = KIR_SUBSTITUTE_HIP_FUNCTION; s->function = (void*)0x1; return 1; }
  if (!strcmp(mode, "hip-code")) {  /* the stub HIP runtime accepts any ELF */
    s->kind = KIR_SUBSTITUTE_CODE; s->code = "\x7f" "ELF code object"; s->code_size = 19; s->code_kind = "code-object";
    s->arch = "gfx90a"; return 1; }
  return 0;
}
static void report(void) {
  kir_hook_stats st; memset(&st, 0, sizeof st); st.struct_size = sizeof st; kir_hook_get_stats(&st);
  printf(NAME " stats handled=%llu substituted=%llu loads=%llu substitute_failures=%llu failures=%llu\n",
         (unsigned long long)st.handled, (unsigned long long)st.substituted, (unsigned long long)st.substitute_loads,
         (unsigned long long)st.substitute_failures, (unsigned long long)st.failures);
  fflush(stdout);
}
static struct { kir_hook_client c; void* after; } slot;
const kir_hook_client* kir_hook_client_entry(void) {
  kir_hook_client* c = &slot.c;
  c->struct_size = V3 ? offsetof(kir_hook_client, launch_override) : sizeof(kir_hook_client);
  c->api_version = V3 ? 3 : KIR_HOOK_API_VERSION;
  c->launch_begin = begin;
  c->launch_completed = completed;
  if (V3) slot.after = (void*)poison;  /* where launch_override would be */
  else if (CLAIM) c->launch_override = claim;
  if (REPORT) atexit(report);
  return c;
}
"""


def build_stub_libraries(d: Path, driver: str = STUB_DRIVER, quiet: bool = False, optimize: bool = False) -> None:
    """The stub runtime and driver as libcudart.so and libcuda.so.1 in `d` (the
    apps link them by those names); `quiet`: their printing compiled out (QUIET),
    for runs of thousands of launches; `optimize`: -O2 (the launch path timed)."""
    (d / "rt.c").write_text(STUB_RUNTIME)
    (d / "drv.c").write_text(driver)
    flags = ["-O2"] if optimize else []
    if quiet:
        (d / "quiet.h").write_text(QUIET)
        flags += ["-include", "quiet.h"]
    for source, name in (("rt.c", "libcudart.so"), ("drv.c", "libcuda.so.1")):
        subprocess.run(["gcc", "-Wall", *flags, "-shared", "-fPIC", source, f"-Wl,-soname,{name}", "-o", name],
                       check=True, cwd=d)


@pytest.fixture(scope="module")
def rig(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("override")
    build_stub_libraries(d)
    (d / "app.c").write_text(APP.replace("AXPY", AXPY))
    (d / "client.c").write_text(CLIENT)

    def cc(*args):
        subprocess.run(["gcc", "-Wall", *map(str, args)], check=True, cwd=d)

    (d / "proteus.c").write_text(STUB_COMMON + r"""
int __proteus_launch_kernel(const void* f, dim3 g, dim3 b, void** args, size_t s, void* st) {
  (void)s; (void)st; printf("stub __proteus_launch_kernel stub=%p grid=%u block=%u a=%g\n", f, g.x, b.x, *(float*)args[0]);
  return 0;
}
""")
    cc("-shared", "-fPIC", "proteus.c", "-o", "libproteus.so")
    cc("app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d), "-o", "app")
    for name, claim, v3, report in (("A", 1, 0, 1), ("B", 1, 0, 0), ("C", 0, 1, 0)):
        cc("-shared", "-fPIC", f"-I{INCLUDE}", f'-DNAME="{name}"', f"-DCLAIM={claim}", f"-DV3={v3}",
           f"-DREPORT={report}", "client.c", "-o", f"lib{name}.so")
    return d, built["kernels.fatbin"], built["kernels_sm90.cubin"]


def run(rig, launches, clients="ABC", log=False, proteus=False, **modes):
    d, fatbin, cubin = rig
    preload = f"{HOOK}:{d / 'libproteus.so'}" if proteus else str(HOOK)
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": preload, "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": ":".join(str(d / f"lib{c}.so") for c in clients), **modes}
    if log:
        env["KIR_HOOK_LOG"] = "1"
    proc = subprocess.run([d / "app", fatbin, cubin, launches], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def lines(proc, prefix):
    return [l for l in proc.stdout.splitlines() if l.startswith(prefix)]
