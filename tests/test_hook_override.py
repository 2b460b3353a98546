"""Hook API 4 (kir/hooks.h): the launch override, without a GPU.

A C program registers a real fatbin (tests/fixtures kernels.cu, built by nvcc)
with the CUDA runtime and loads the same kernels' sm_90 cubin through the
driver, then launches through every path the layer interposes. The runtime and
the driver are stubs written here (libcudart.so / libcuda.so.1): registrations
succeed, and every launch that reaches them prints one line naming the entry
point, the function and the arguments it got — so a test sees exactly what ran.
Clients are C libraries loaded through KIR_HOOK_CLIENTS; each prints what the
layer told it."""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import kir
from kir.errors import KirError
from build import rpath  # tests/fixtures/build.py (conftest puts it on the path)

# The stub runtimes are found whatever LD_LIBRARY_PATH says (a GPU machine names the
# real driver's directory there): the programs carry DT_RPATH (issue 21, item 16).
pytestmark = pytest.mark.usefixtures("hostile_library_path")

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
  if (!strcmp(mode, "code-number") || !strcmp(mode, "hip-number")) {  /* API 6: the kind only as a number */
    kir_hook_code code;
    if (s->struct_size < offsetof(kir_hook_substitute, image_kind) + sizeof s->image_kind || !l->kernel ||
        !kir_hook_kernel_code(l->kernel, KIR_CODE_LAUNCHED, &code))
      return 0;
    s->kind = KIR_SUBSTITUTE_CODE; s->code = code.bytes; s->code_size = code.size; s->code_kind = NULL;
    s->image_kind = !strcmp(mode, "hip-number") ? KIR_KIND_CODE_OBJECT
                    : !strcmp(code.kind, "ptx") ? KIR_KIND_PTX : KIR_KIND_CUBIN;
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
  printf(NAME " failures by code");  /* API 6: those that were libkir errors, by KIR_ERROR_* */
  for (uint32_t code = 1; code <= KIR_ERROR_INTERNAL; ++code)
    if (kir_hook_failure_count(code)) printf(" %u=%llu", code, (unsigned long long)kir_hook_failure_count(code));
  printf("\n");
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


ALL_PATHS = "rpcdxgPkKe"


def test_without_a_claim_every_launch_reaches_the_runtime(rig):
    proc = run(rig, ALL_PATHS)
    stub = lines(proc, "stub ")
    assert [l.split()[1] for l in stub] == ["cudaLaunchKernel", "cudaLaunchKernel_ptsz",
                                           "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                                           "cuLaunchKernel", "cudaLaunchKernel", "__cudaLaunchKernel",
                                           "__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC"]
    assert all(f"f={AXPY}" in l for l in stub if l.startswith("stub cuLaunch"))
    completed = lines(proc, "A completed")
    assert len(completed) == len(ALL_PATHS)
    assert all("outcome=0 claimed_by=-1 id=0:0" in l for l in completed)
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=0 failures=0"]


def test_handled_launches_reach_nothing(rig):
    proc = run(rig, ALL_PATHS, A_MODE="handled")
    assert lines(proc, "stub ") == []
    assert lines(proc, "app ") == [f"app {c} returned 77" for c in ALL_PATHS]
    apis = ["cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
            "cuLaunchKernelEx", "cuLaunchKernel", "__proteus_launch_kernel", "__cudaLaunchKernel",
            "__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC"]
    # The claimer was asked about the registered kernel; every client saw launch_begin
    # (already knowing the outcome) and launch_completed with what happened.
    assert lines(proc, "A asked") == [f"A asked {api} kernel={AXPY} sized=1" for api in apis]
    for name in "AB":
        assert lines(proc, f"{name} begin") == [f"{name} begin {api} outcome=1 claimed_by=0" for api in apis]
        assert lines(proc, f"{name} completed") == [
            f"{name} completed {api} result=77 outcome=1 claimed_by=0 id=1d:2e" for api in apis]
    assert lines(proc, "A stats") == [f"A stats handled={len(apis)} substituted=0 loads=0 substitute_failures=0 "
                                      "failures=0"]


def test_first_claimer_wins_and_a_v3_client_is_unaffected(rig):
    proc = run(rig, "rd", A_MODE="none", B_MODE="handled")
    assert lines(proc, "A asked") == []  # A declined
    assert len(lines(proc, "B asked")) == 2
    assert lines(proc, "A completed")[0].endswith("result=77 outcome=1 claimed_by=1 id=1d:2e")
    # A claims: B is never asked. C's struct ends before launch_override (the poison
    # after it is never called) and it sees the launches as a v3 client would.
    proc = run(rig, "rd", A_MODE="handled", B_MODE="handled")
    assert lines(proc, "B asked") == []
    assert lines(proc, "C begin") == ["C begin cudaLaunchKernel outcome=-9 claimed_by=-9",
                                      "C begin cuLaunchKernel outcome=-9 claimed_by=-9"]
    assert lines(proc, "C completed") == ["C completed cudaLaunchKernel result=77",
                                          "C completed cuLaunchKernel result=77"]
    assert "POISON" not in proc.stdout


def test_a_claim_bypasses_the_proteus_runtime(rig):
    """With Proteus loaded, __proteus_launch_kernel goes to it — unless a client claims."""
    plain = run(rig, "P", proteus=True)
    assert [l.split()[1] for l in lines(plain, "stub ")] == ["__proteus_launch_kernel"]
    claimed = run(rig, "P", proteus=True, A_MODE="function")
    assert lines(claimed, "stub ") == ["stub cuLaunchKernel f=0xf00d grid=4 block=32 shared=16 stream=0x5 a=2.5"]


def test_kir_trace_names_the_claim(rig):
    """The trace client (KIR_TRACE) prints who claimed a launch and what ran."""
    import json
    proc = run(rig, "rd", A_MODE="function", KIR_TRACE="json")
    launches = [json.loads(l) for l in proc.stderr.splitlines() if l.startswith('{"event":"launch"')]
    assert [(e["api"], e["outcome"], e["substitute"]) for e in launches] == [
        ("cudaLaunchKernel", "substituted", "000000000000001d000000000000002e"),
        ("cuLaunchKernel", "substituted", "000000000000001d000000000000002e")]
    assert len({e["claimed_by"] for e in launches}) == 1
    plain = run(rig, "r", KIR_TRACE="json")
    assert "claimed_by" not in plain.stderr and '"event":"launch"' in plain.stderr


def test_a_function_substitute_runs_with_the_app_s_configuration(rig):
    proc = run(rig, ALL_PATHS, A_MODE="function")
    # Never the runtime's launch; the driver launches 0xf00d with the app's grid,
    # block, dynamic shared memory, stream and arguments (a = 2.5, 3.5, ...).
    stub = lines(proc, "stub ")
    expected_api = ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchCooperativeKernel", "cuLaunchKernel",
                    "cuLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel_ptsz",
                    "cuLaunchKernelEx"]
    assert stub == [f"stub {api} f=0xf00d grid=4 block=32 shared=16 stream=0x5 a={2.5 + i:g}"
                    for i, api in enumerate(expected_api)]
    assert all(l.endswith("result=0 outcome=2 claimed_by=0 id=1d:2e") for l in lines(proc, "B completed"))
    assert lines(proc, "A stats") == [f"A stats handled=0 substituted={len(ALL_PATHS)} loads=0 "
                                      "substitute_failures=0 failures=0"]
    proc = run(rig, "rd", A_MODE="kernel")  # a CUkernel is launched as a CUfunction
    assert [l.split()[2] for l in lines(proc, "stub ")] == ["f=0xbeef", "f=0xbeef"]


def test_substitute_code_is_loaded_once_per_context(rig):
    proc = run(rig, "rrdpgx", A_MODE="code")
    # The kernel's own cubin, loaded by the layer once (one load for the app's own
    # cuModuleLoadData, one for the substitute), its entry found by the kernel's name.
    assert "stub-driver cuModuleLoadData=2" in proc.stderr
    stub = lines(proc, "stub ")
    assert len(stub) == 6 and all(f"f={AXPY} " in l for l in stub)
    assert [l.split()[1] for l in stub][:3] == ["cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel"]
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=6 loads=1 substitute_failures=0 failures=0"]
    # PTX, under another entry name (what the client names is launched).
    proc = run(rig, "rr", A_MODE="ptx", A_ENTRY="_Z9clusteredPf")
    assert "stub-driver cuModuleLoadData=2" in proc.stderr
    assert all("f=_Z9clusteredPf " in l for l in lines(proc, "stub "))


def test_substitute_code_named_by_its_number_is_loaded(rig):
    """API 6: code_kind NULL, kir_hook_substitute.image_kind KIR_KIND_CUBIN: the layer loads it
    as it loads code named "cubin"; a number the runtime cannot load is refused by number."""
    proc = run(rig, "rrd", A_MODE="code-number")
    assert "stub-driver cuModuleLoadData=2" in proc.stderr
    stub = lines(proc, "stub ")
    assert len(stub) == 3 and all(f"f={AXPY} " in l for l in stub)
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=3 loads=1 substitute_failures=0 failures=0"]
    proc = run(rig, "r", log=True, A_MODE="hip-number")
    assert 'image_kind 5 (code-object) cannot be loaded by the CUDA runtime ("cubin" or "ptx")' in proc.stderr
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=1 failures=1"]


def test_a_damaged_fatbin_is_counted_under_its_error_code(rig, tmp_path):
    """kir_hook_failure_count (API 6): a registration libkir cannot parse is counted under its
    error's code (KIR_ERROR_*), the code Python's reader raises for the same bytes."""
    d, fatbin, cubin = rig
    good = fatbin.read_bytes()
    second = kir.open(fatbin).containers[0].images[1].entry.offset
    for name, at, patch in (("magic", 0, bytes([good[0] ^ 0xFF])),  # the container's magic
                            ("entry", second + 8, struct.pack("<Q", 1 << 32))):  # a payload past the container
        damaged = tmp_path / f"{name}.fatbin"
        damaged.write_bytes(good[:at] + patch + good[at + len(patch):])
        with pytest.raises(KirError) as error:
            kir.open(damaged).images
        proc = run((d, damaged, cubin), "", log=True)
        assert "registered without its code" in proc.stderr
        assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=0 failures=1"]
        assert lines(proc, "A failures by code") == [f"A failures by code {error.value.code.value}=1"], name
    # Failures that are no libkir error (a substitute the driver refuses) have no code.
    proc = run(rig, "r", A_MODE="bad-code")
    assert lines(proc, "A failures by code") == ["A failures by code"]


def test_a_substitute_that_cannot_load_launches_the_original_and_is_logged(rig):
    proc = run(rig, "rd", log=True, A_MODE="bad-code")
    stub = lines(proc, "stub ")
    assert [l.split()[1] for l in stub] == ["cudaLaunchKernel", "cuLaunchKernel"]
    assert stub[1].split()[2] == f"f={AXPY}"
    assert all(l.endswith("result=0 outcome=0 claimed_by=0 id=1d:2e") for l in lines(proc, "A completed"))
    logged = [l for l in proc.stderr.splitlines() if l.startswith("kir-hook: error:")]
    assert len(logged) == 2
    assert re.fullmatch(rf"kir-hook: error: launch of {AXPY} \(cudaLaunchKernel\): client 0's substitute "
                        r"000000000000001d000000000000002e: cuModuleLoadData of its cubin failed: error 200; "
                        r"the original kernel is launched", logged[0]), logged[0]
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=2 failures=2"]
    # A handle of the other vendor, and no current context for code: the same.
    proc = run(rig, "r", log=True, A_MODE="hip")
    assert "a hipFunction_t for a CUDA launch" in proc.stderr and len(lines(proc, "stub cudaLaunchKernel")) == 1
    proc = run(rig, "d", log=True, A_MODE="code", STUB_NO_CONTEXT="1")
    assert "no current CUDA context" in proc.stderr and lines(proc, "stub cuLaunchKernel")[0].split()[2] == f"f={AXPY}"


# --- HIP -------------------------------------------------------------------------------------

# The suite's stub libamdhip64.so (tests/fixtures/hip_stub_runtime.c: launches fail
# with 100, no device) plus the module API a substitute needs, printing what it gets.
HIP_STUB = r"""
#include "hip_stub_runtime.c"
#include <stdio.h>
#include <string.h>
static int loads;
static char module_marker, function_marker;
static void report(void) { fprintf(stderr, "stub-hip hipModuleLoadData=%d\n", loads); }
int hipGetDevice(int* d) { static int once; if (!once++) atexit(report); *d = 0; return 0; }
int hipModuleLoadData(void** m, const void* image) {
  ++loads; if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200; *m = &module_marker; return 0; }
int hipModuleGetFunction(void** f, void* m, const char* name) {
  (void)m; printf("stub hipModuleGetFunction %s\n", name); *f = &function_marker; return 0; }
int hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned sh, void* st, void** p, void** e) {
  (void)gy; (void)gz; (void)by; (void)bz; (void)st; (void)p; (void)e;
  printf("stub hipModuleLaunchKernel f=%s grid=%u block=%u shared=%u\n", f == &function_marker ? "loaded" : "handle",
         gx, bx, sh);
  return 0;
}
"""


@pytest.fixture(scope="module")
def hip_rig(built, rig):
    if "hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP app cannot be built")
    # hip_app finds its runtime in $ORIGIN/.hip_app.work (DT_RPATH, build.rpath): a copy
    # of the app finds this one there, whatever LD_LIBRARY_PATH says.
    d = rig[0] / "hip"
    (d / ".hip_app.work").mkdir(parents=True, exist_ok=True)
    shutil.copy(built["hip_app"], d / "hip_app")
    (d / "stub.c").write_text(HIP_STUB)
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", str(Path(__file__).parent / "fixtures"), "stub.c",
                    "-Wl,-soname,libamdhip64.so", "-o", ".hip_app.work/libamdhip64.so"], check=True, cwd=d)
    return d, d / "hip_app", rig[0]


def run_hip(hip_rig, **modes):
    d, app, clients = hip_rig
    proc = subprocess.run([app], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "KIR_HOOK_LOG": "1",
                               "KIR_HOOK_CLIENTS": ":".join(str(clients / f"lib{c}.so") for c in "ABC"),
                               **modes})
    return proc


def test_hip_launches_can_be_claimed(hip_rig):
    plain = run_hip(hip_rig)
    assert plain.returncode == 3 and lines(plain, "launch ") == ["launch 100", "launch 100"]  # the stub's
    handled = run_hip(hip_rig, A_MODE="handled")
    assert lines(handled, "launch ") == ["launch 77", "launch 77"]
    assert [l.split()[3] for l in lines(handled, "A asked")] == ["kernel=_Z4axpyfPKfPfi", "kernel=_Z5countx"]
    # A hipFunction_t: launched with hipModuleLaunchKernel and the app's configuration.
    function = run_hip(hip_rig, A_MODE="hip")
    assert lines(function, "stub hipModuleLaunchKernel") == [
        "stub hipModuleLaunchKernel f=handle grid=8 block=128 shared=0",
        "stub hipModuleLaunchKernel f=handle grid=1 block=64 shared=16"]
    assert lines(function, "launch ") == ["launch 0", "launch 0"]
    # Code: a code object loaded once per device, its entry the launched kernel's name.
    code = run_hip(hip_rig, A_MODE="hip-code")
    assert lines(code, "stub hipModuleGetFunction") == ["stub hipModuleGetFunction _Z4axpyfPKfPfi",
                                                       "stub hipModuleGetFunction _Z5countx"]
    assert "stub-hip hipModuleLoadData=2" in code.stderr  # two kernels: two (id, entry) keys
    assert all(l.endswith("outcome=2 claimed_by=0 id=1d:2e") for l in lines(code, "B completed"))
    # A CUDA handle for a HIP launch: logged, the original runs.
    wrong = run_hip(hip_rig, A_MODE="function")
    assert lines(wrong, "launch ") == ["launch 100", "launch 100"]
    assert wrong.stderr.count("a CUDA handle for a HIP launch") == 2
