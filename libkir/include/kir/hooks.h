/* kir hook layer: the client API (libkir_hook.so).
 *
 * libkir_hook.so interposes the GPU runtime (LD_PRELOAD, or linked) and tells
 * clients what happens: fatbins, kernels and globals registered, allocations
 * made and freed, launches about to happen. Clients are a struct of callbacks;
 * any callback may be NULL. `struct_size` versions the struct: the layer reads
 * only the fields a client's struct has, so old clients keep working.
 *
 * Clients register by calling kir_hook_add_client() from linked code, or are
 * loaded from the shared libraries named in KIR_HOOK_CLIENTS (colon-separated),
 * each exporting `const kir_hook_client* kir_hook_client_entry(void)`.
 * Callbacks may run on any application thread, concurrently.
 *
 * Setuid programs: in a secure-execution process (AT_SECURE: setuid, setgid,
 * file capabilities) the layer loads no client from KIR_HOOK_CLIENTS and
 * ignores every KIR_* setting (KIR_HOOK_LOG, KIR_HOOK_ARCH, the tracing and
 * recording clients' own); it says so once on stderr when one is set. Other
 * processes read them with secure_getenv.
 *
 * Unloading: when the app unregisters a fatbin (__cudaUnregisterFatBinary, run
 * as a library is dlclose'd or the process exits; __hipUnregisterFatBinary) or
 * unloads a module (cuModuleUnload, cuLibraryUnload), clients are told
 * (fatbin_unregistered), then the layer drops every view it had of that image
 * and frees what it held of it: the code bytes kir_hook_kernel_code and
 * kir_hook_kernel_code_unit handed out, and the kernels' embedded IR (their
 * `ir` becomes NULL, `ir_size` 0) — those are valid until fatbin_unregistered
 * returns. The kernel and global views stay valid for the process's life (the
 * layer owns their names and layouts), marked `unloaded`; a later registration
 * at the same host address is a new kernel or global. So a process that loads
 * and unloads modules does not grow by their images.
 *
 * Errors: the layer never fails the app's call, and never drops what it cannot
 * use silently: each fatbin, module, code object, kernel or client it cannot
 * parse or load is counted (kir_hook_stats.failures; those that were libkir errors
 * also by their KIR_ERROR_* code, kir_hook_failure_count). KIR_HOOK_LOG=1 prints one
 * line per failure on stderr, KIR_HOOK_LOG=PATH appends them to PATH:
 *   kir-hook: error: fatbin 0x55d0c0a0: registered without its code: container at 0x7f..: <libkir's error, with its
 * offset> (a client named in KIR_HOOK_CLIENTS that cannot be loaded is printed always).
 *
 * Versions: KIR_HOOK_API_VERSION is the API a client is built against;
 * kir_hook_api_version() is the layer's, at run time. The layer refuses a
 * client whose `api_version` is newer than its own (a failure, printed always).
 * Structs the app or client passes in carry `struct_size`; structs the layer
 * hands out (kir_hook_kernel, kir_hook_global, kir_hook_launch) carry it too,
 * since API 6, as their LAST field: fields are only ever appended, an older
 * client reads the prefix it knows, and a newer client reads a field only when
 * the layer's struct has it. docs/abi.md ("hooks.h") lists every field with the
 * API that added it, and how a client built for API N runs on a layer of API M.
 *
 * Launch override (API 4). Before a launch, the layer asks the clients that
 * have `launch_override`, in registration order; the first that returns 1
 * claims it and no later one is asked. Then every client gets launch_begin
 * (the claimer too; `outcome`, `claimed_by` and `substitute_id` already say what
 * will run). The claim, filled in `*out` (zeroed by the layer, with its
 * struct_size set: the client writes no field past it), is one of
 *   KIR_SUBSTITUTE_HANDLED   nothing is launched; the app's call returns `result`
 *                            (the client ran the work itself, or chose to fail it);
 *   KIR_SUBSTITUTE_FUNCTION  launch this loaded CUfunction (CUDA) instead;
 *   KIR_SUBSTITUTE_KERNEL    launch this CUkernel (cuLibraryGetKernel) instead;
 *   KIR_SUBSTITUTE_HIP_FUNCTION launch this hipFunction_t (HIP) instead;
 *   KIR_SUBSTITUTE_CODE      load `code` (`code_kind` "cubin" or "ptx" for CUDA,
 *                            "code-object" for HIP; from API 6 `code_kind` NULL and
 *                            `image_kind` the KIR_KIND_* number) and launch its kernel `entry`
 *                            (NULL: the launched kernel's own name). The layer loads
 *                            it ONCE per context (CUDA: the current CUcontext; HIP:
 *                            the current device) through the driver's
 *                            cuModuleLoadData / hipModuleLoadData and keeps the
 *                            module for the process's life, keyed by `id` (by the
 *                            code bytes' hash when `id` is zero): different code
 *                            must carry different ids. The bytes (and `entry`)
 *                            need to stay valid only until the app's launch call
 *                            returns; those of a cache hit are not read at all.
 *                            The layer keeps no pointer to them: the driver copies
 *                            the image into the module it loads (PTX is first
 *                            copied by the layer when it is not NUL-terminated), so
 *                            a client may reuse or free its buffer once the launch
 *                            call returned. API 7: the claimer's on_loaded is told
 *                            of each load (module, function, context) before the
 *                            first launch; a launch with more than 48 KiB of
 *                            dynamic shared memory first raises the function's
 *                            limit (cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)
 *                            / hipFuncSetAttribute), once per size, as an app does
 *                            for its own kernels.
 * A substitute is launched with the app's arguments, grid, block, dynamic shared
 * memory and stream, through the driver: cuLaunchKernel (cuLaunchKernelEx with
 * the app's attributes for cudaLaunchKernelExC / cuLaunchKernelEx,
 * cuLaunchCooperativeKernel for cudaLaunchCooperativeKernel, the _ptsz entry
 * for the per-thread-default-stream calls) or hipModuleLaunchKernel; the app's
 * call returns that launch's result (CUresult values equal cudaError_t's for
 * launch errors). A substitute that cannot be launched — its code does not load,
 * `entry` is not in it, a handle of the other vendor, no current context — is a
 * failure (counted, KIR_HOOK_LOG line): the ORIGINAL is launched, and
 * launch_completed says so (outcome ORIGINAL, claimed_by still the claimer).
 * Launch paths covered: cudaLaunchKernel, cudaLaunchKernel_ptsz,
 * cudaLaunchKernelExC, cudaLaunchCooperativeKernel, __cudaLaunchKernel(_ptsz)
 * (CUDA 13's <<<>>>), cuLaunchKernel(_ptsz), cuLaunchKernelEx(_ptsz) — also as
 * cuGetProcAddress hands them to a statically linked runtime —,
 * __proteus_launch_kernel and hipLaunchKernel. With no client that has
 * launch_override, a launch pays one relaxed atomic load for all this.
 *
 * JIT arguments (API 4). Proteus-compiled programs describe each kernel's
 * runtime-constant arguments at registration: the pass calls
 * __proteus_create_runtime_constant_info_{scalar,array_const_size,
 * array_runconst_size,object} and passes the objects' array to
 * __proteus_register_function (Proteus src/pass/ProteusPass.cpp,
 * getProteusCreateRuntimeConstantInfo*Fn, getJitRegisterFunctionFn). The layer
 * interposes them: with the Proteus runtime loaded it forwards each call and
 * returns Proteus's object (remembering what it described), without it it
 * returns its own. Proteus's 0-based `Pos` / `NumEltsPos` become 1-based
 * positions, its RuntimeConstantType a kir_arg_type (BOOL, INT8, INT32, INT64,
 * FLOAT, DOUBLE, PTR: KIR_ARG_BOOL, I8, I32, I64, F32, F64, PTR; LONG_DOUBLE:
 * KIR_ARG_BYTES); STATIC_ARRAY is an array held in the argument's own bytes
 * (KIR_JIT_ARRAY, by_value 1), VECTOR a vector argument's elements (KIR_JIT_VECTOR,
 * by_value 1; since API 7), ARRAY an array behind a pointer (by_value 0). The
 * runtime ABI is the hook's only source: the `jit` annotations and the
 * `!proteus.jit` metadata of the embedded IR are what the pass turned into these
 * calls (python/kir/ir.py reads them offline). __proteus_register_function runs
 * right after the runtime registered the kernel, so kernel_registered comes
 * before the kernel's jit_args are set: read them at launch.
 */
#ifndef KIR_HOOKS_H
#define KIR_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "kir/kir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KIR_HOOK_API_VERSION 11

/** The API of the layer in this process (KIR_HOOK_API_VERSION as it was built):
 *  a client built for a newer API calls this before reading a field the layer
 *  may not have. API 1-5 layers lack this symbol: look it up with dlsym (NULL: 5
 *  or older). */
uint32_t kir_hook_api_version(void);

typedef struct kir_dim3 {
  uint32_t x, y, z;
} kir_dim3;

typedef struct kir_hook_kernel {
  const char* name;      /* mangled */
  const void* host_stub; /* the host function the app launches by */
  const void* fatbin;    /* the registration handle it came with */
  uint32_t param_count;  /* 0 when the layout is unknown */
  const uint32_t* param_offsets;
  const uint32_t* param_sizes;
  kir_hash128 static_hash;
  const void* ir; /* LLVM bitcode the Proteus pass embedded for this kernel (HIP) or its
                     translation unit (CUDA), from the same image; NULL when none.
                     Valid until fatbin_unregistered returns, then NULL (API 3) */
  size_t ir_size;
  /* API 2: */
  int unloaded; /* 1 once its fatbin or module was unregistered (read it atomically:
                   __atomic_load_n); the view stays valid, launches by `host_stub`
                   no longer find it, kir_hook_kernel_code refuses it */
  /* API 4: */
  uint32_t jit_arg_count; /* runtime-constant arguments (Proteus ABI), 0 when none or not yet
                             registered: read it with __atomic_load_n(..., __ATOMIC_ACQUIRE),
                             then `jit_args` (by increasing position, valid for the process's
                             life, set once) */
  const kir_jit_arg* jit_args;
  /* API 6: */
  uint32_t struct_size; /* sizeof(kir_hook_kernel) as the layer was built: a field lies in
                           the layer's struct when offsetof + its size <= struct_size. Present
                           when kir_hook_api_version() >= 6 (docs/abi.md) */
} kir_hook_kernel;

typedef struct kir_hook_global {
  const char* name;
  const void* host_address; /* the runtime's host shadow (__cudaRegisterVar); API 9: for a global of
                               a module loaded through the driver API (cuModuleLoadData...; `fatbin`
                               is the module) a token the layer owns, not the variable's memory —
                               kir_hook_global_device_address answers for it (cuModuleGetGlobal) */
  size_t size;
  const void* fatbin;
  /* API 2: */
  int unloaded; /* 1 once its fatbin was unregistered; kir_hook_global_device_address
                   then returns 0 for `host_address` (unless registered again) */
  /* API 6: */
  uint32_t struct_size; /* sizeof(kir_hook_global) as the layer was built (as kir_hook_kernel's) */
} kir_hook_global;

/* Allocation kinds: the values of kir::AllocationKind (kir/model.hpp), whose
 * one name table ("device", "managed", "host-pinned") `kir trace` and records use. */
#define KIR_ALLOC_DEVICE 1
#define KIR_ALLOC_MANAGED 2
#define KIR_ALLOC_HOST_PINNED 3

typedef struct kir_hook_allocation {
  uint64_t address;
  uint64_t size;
  int kind;  /* KIR_ALLOC_* */
  void* tag; /* a client's, set by kir_hook_tag_allocation; NULL until then */
} kir_hook_allocation;

typedef struct kir_hook_launch {
  const kir_hook_kernel* kernel; /* NULL when the stub was never registered */
  const void* host_stub;
  kir_dim3 grid, block;
  size_t shared_bytes;
  const void* stream;
  void** args; /* as the app passed them */
  union {      /* the launch identity (docs/hashing.md): static hash, arch,
                  every argument's bytes, grid, block and shared_bytes —
                  what a recorder deduplicates on. `dynamic_hash` is its
                  name before format 2 (same storage; it did not cover
                  shared_bytes then) */
    kir_hash128 launch_identity;
    kir_hash128 dynamic_hash;
  };
  int result;      /* launch_completed only: the runtime's return code */
  const char* api; /* "cudaLaunchKernel", "cuLaunchKernel", "__proteus_launch_kernel", ... */
  /* API 4 (the launch override; see above): */
  int outcome;               /* KIR_LAUNCH_*: what ran (launch_begin: what will run) */
  int claimed_by;            /* the claiming client's index in the layer's table (registration
                                order, from 0: KIR_HOOK_CLIENTS in their order, then those
                                kir_hook_add_client adds), -1 when none claimed */
  kir_hash128 substitute_id; /* the claimer's kir_hook_substitute.id (e.g. its JIT key); zero
                                when none claimed */
  /* API 6: */
  uint32_t struct_size; /* sizeof(kir_hook_launch) as the layer was built (as
                           kir_hook_kernel's) */
  /* API 7 (read them only when struct_size covers them): the device the launch runs on,
     set before launch_override is asked. -1, "" and NULL when unknown, and for every
     client when none reads them (each sets KIR_HOOK_SKIP_DEVICE or is built for API 6
     or older). */
  int device;          /* its ordinal (CUDA: cuCtxGetDevice in `context`; HIP: hipGetDevice), -1 unknown */
  const char* arch;    /* CUDA: "sm_90" (the device's compute capability); HIP: the target of the
                          code object the layer reads for the kernel ("gfx90a:sramecc+:xnack-"),
                          "" when unknown; valid for the process's life */
  const void* context; /* CUDA: the CUcontext current at the launch (for a runtime-API launch
                          with none current, the primary context, made current first as the
                          runtime itself would); HIP: NULL */
  /* API 11 (read it only when struct_size covers it): */
  int vendor; /* KIR_HOOK_VENDOR_*: the runtime the launch came through (the CUDA runtime or
                 driver API: CUDA; a __proteus_launch_kernel: the runtime that registered the
                 kernel), set for every launch, before launch_override is asked */
} kir_hook_launch;

/* kir_hook_launch.vendor, kir_hook_vendor_symbol's `vendor` (API 11) */
#define KIR_HOOK_VENDOR_CUDA 1
#define KIR_HOOK_VENDOR_HIP 2

#define KIR_LAUNCH_ORIGINAL 0    /* the app's kernel (also when a claimed substitute failed) */
#define KIR_LAUNCH_HANDLED 1     /* a client handled it: nothing was launched */
#define KIR_LAUNCH_SUBSTITUTED 2 /* a client's substitute ran instead */

/* kir_hook_substitute.kind */
#define KIR_SUBSTITUTE_HANDLED 1
#define KIR_SUBSTITUTE_FUNCTION 2
#define KIR_SUBSTITUTE_KERNEL 3
#define KIR_SUBSTITUTE_HIP_FUNCTION 4
#define KIR_SUBSTITUTE_CODE 5

/** What a client's launch_override claims (API 4; see "Launch override" above). */
typedef struct kir_hook_substitute {
  uint32_t struct_size; /* set by the layer: sizeof(kir_hook_substitute) as it was compiled;
                           the client writes no field that lies past it */
  int kind;             /* KIR_SUBSTITUTE_* */
  int result;           /* HANDLED: what the app's launch call returns (0: success) */
  const void* function; /* FUNCTION, KERNEL, HIP_FUNCTION: the handle to launch */
  const void* code;     /* CODE: the image (cubin, PTX text, AMDGPU code object) */
  size_t code_size;
  const char* code_kind; /* CODE: "cubin", "ptx" or "code-object" */
  const char* arch;      /* CODE: its target ("sm_90", "gfx90a"), for failure lines; the driver checks */
  const char* entry;     /* CODE: the kernel to launch in it; NULL: the launched kernel's name */
  kir_hash128 id;        /* the substitute's identity (its JIT key): reported as
                            kir_hook_launch.substitute_id; CODE: the module cache's key */
  /* API 6 (write it only when struct_size covers it: an API-5 layer's struct ends before): */
  uint32_t image_kind; /* CODE: the kind as a number, KIR_KIND_CUBIN, KIR_KIND_PTX or
                          KIR_KIND_CODE_OBJECT (kir.h; as kir_cache_entry.image_kind), read
                          when code_kind is NULL */
} kir_hook_substitute;

/** API 7. A CODE substitute the layer loaded for the client that claimed it
 *  (kir_hook_client.on_loaded): where, and the handles it made, so that the
 *  client can prepare them before the first launch — write the module's device
 *  globals (Proteus relinks `NAME$ptr` globals to the app's: cuModuleGetGlobal
 *  on `module`, then a copy, through kir_hook_driver_symbol's entry points), or
 *  set function attributes — without loading modules itself. The handles stay
 *  valid for the process's life (the layer never unloads an accepted substitute). */
typedef struct kir_hook_loaded {
  uint32_t struct_size;          /* sizeof(kir_hook_loaded) as the layer was built */
  int device;                    /* the device ordinal (as kir_hook_launch.device), -1 unknown */
  kir_hash128 id;                /* the claim's kir_hook_substitute.id (the code bytes' hash when it was zero) */
  const kir_hook_kernel* kernel; /* the launched kernel; NULL when the layer does not know it */
  const void* module;            /* the CUmodule / hipModule_t the layer loaded the code into */
  const void* function;          /* its CUfunction / hipFunction_t `entry`: what the layer launches */
  const void* context;           /* CUDA: the CUcontext it was loaded in; HIP: NULL */
  const char* entry;             /* the kernel's name in the module (valid during the call) */
  const char* arch;              /* as kir_hook_launch.arch */
} kir_hook_loaded;

/** A client's allocator for device memory (cudaMalloc, cudaMallocAsync,
 *  cuMemAlloc, cuMemAllocAsync, hipMalloc, hipMallocAsync and their frees): a recorder serving
 *  allocations from a fixed virtual-address range, say. `allocate` returns 0
 *  and sets `*address` when it served the request, non-zero to let the runtime
 *  allocate. `release` returns 1 when it had served `address` and released it,
 *  0 to let the runtime free it. `stream` is the async calls' stream, else NULL.
 *  Served allocations are tracked and reported like the runtime's own. */
typedef struct kir_hook_allocator {
  uint32_t struct_size; /* sizeof(kir_hook_allocator) */
  void* user;
  int (*allocate)(void* user, uint64_t size, const void* stream, uint64_t* address);
  int (*release)(void* user, uint64_t address, const void* stream);
} kir_hook_allocator;
typedef struct kir_hook_client {
  uint32_t struct_size; /* sizeof(kir_hook_client) as the client was compiled */
  uint32_t api_version; /* KIR_HOOK_API_VERSION */
  void* user;           /* passed back to every callback */
  void (*fatbin_registered)(void* user, const void* fatbin, size_t images);
  void (*kernel_registered)(void* user, const kir_hook_kernel* kernel);
  void (*global_registered)(void* user, const kir_hook_global* global);
  void (*allocated)(void* user, const kir_hook_allocation* allocation);
  void (*freed)(void* user, const kir_hook_allocation* allocation);
  void (*launch_begin)(void* user, const kir_hook_launch* launch);
  void (*launch_completed)(void* user, const kir_hook_launch* launch); /* see `completion` */
  int completion;                      /* KIR_COMPLETION_*: when launch_completed comes (a smaller struct: RETURNED) */
  const kir_hook_allocator* allocator; /* optional: installed when the client is added, as by
                                          kir_hook_set_allocator (a client loaded from the
                                          environment cannot call the layer while it loads) */
  /* API 2 (a client whose struct_size stops before this is never called with it): */
  void (*fatbin_unregistered)(void* user, const void* fatbin, size_t kernels);
  /* the registration handle or module, and how many kernels were
     registered with it, before the layer drops it: those kernels are
     not yet `unloaded` and kir_hook_kernel_code still answers; after
     the callback they are */
  /* API 4: */
  int (*launch_override)(void* user, const kir_hook_launch* launch, kir_hook_substitute* out);
  /* return 1 to claim the launch (filling `*out`), 0 to let it be;
     asked before launch_begin, on the app's thread; `launch->kernel`
     is NULL for a kernel the layer does not know */
  /* API 5: */
  uint32_t launch_skips; /* KIR_HOOK_SKIP_*: what of a launch event this client never reads,
                            so that the layer need not compute it at each launch. 0 (and any
                            client whose struct_size stops before this field): everything is
                            computed, as for API 1-4 clients. */
  /* API 7 (launch services; see kir_hook_loaded): */
  int (*on_loaded)(void* user, const kir_hook_loaded* loaded);
  /* a CODE substitute this client claimed was just loaded: called
     once per (context, id), on the launching thread, before its
     first launch, while no other thread can launch it. Return 0 to
     launch it; non-zero refuses it (the layer unloads the module,
     counts a substitute failure and launches the original; the
     next claim of that id loads it again) */
} kir_hook_client;

/* kir_hook_client.launch_skips. The layer computes a launch event's
 * launch_identity (a hash over every argument's bytes) only when some client
 * does not skip it, and looks its `kernel` up only when some client does not
 * skip that; skipped, they are zero / NULL for every client. A client that
 * reads neither — e.g. one that counts launches — costs the launch path only its
 * callbacks. SKIP_KERNEL implies SKIP_IDENTITY. */
#define KIR_HOOK_SKIP_IDENTITY 0x1u
#define KIR_HOOK_SKIP_KERNEL 0x2u
/* API 7: the client never reads kir_hook_launch.device, arch, context (one
 * cuCtxGetCurrent per launch saved when no client reads them). */
#define KIR_HOOK_SKIP_DEVICE 0x4u

/* When a client's launch_completed is called, for launches the runtime accepted
 * (a failed launch is reported at once, with its error):
 *   RETURNED       as the launch call returns (the kernel may still be running);
 *   SYNCHRONIZE    after the hook synchronized the launch's stream, on the app's
 *                  thread (the kernel is done; the app waits for it);
 *   STREAM_ORDERED from a host function enqueued on the stream after the kernel
 *                  (the kernel is done; the app does not wait; the callback runs
 *                  on a runtime thread, must not call the GPU runtime, and sees
 *                  copies of the argument bytes). */
#define KIR_COMPLETION_RETURNED 0
#define KIR_COMPLETION_SYNCHRONIZE 1
#define KIR_COMPLETION_STREAM_ORDERED 2

/** Record an allocation the layer cannot see (a client's own allocator); `kind` is
 *  KIR_ALLOC_* (another value is tracked all the same, and counted as a failure). */
void kir_hook_track_allocation(uint64_t address, uint64_t size, int kind);
void kir_hook_untrack_allocation(uint64_t address);

/** The kernels registered so far, unloaded ones included (their `unloaded`
 *  flag set): their count, and the i-th one (valid for the process's life). */
size_t kir_hook_kernel_count(void);
const kir_hook_kernel* kir_hook_kernel_at(size_t index);

/** The device variables registered so far, unloaded ones included: their
 *  count, the i-th one (valid for the process's life), and the device address
 *  of the live one registered with `host_address` — resolved through the
 *  runtime on first request (the module is then loaded on the current device)
 *  and cached; 0 when it cannot be or none is registered there. */
size_t kir_hook_global_count(void);
const kir_hook_global* kir_hook_global_at(size_t index);
uint64_t kir_hook_global_device_address(const void* host_address);

/** A registered kernel's device code, as the layer holds it (valid until its
 *  fatbin or module is unregistered and fatbin_unregistered returns). `which`: KIR_CODE_LAUNCHED, the image its
 * launches use (a cubin, or PTX the driver compiles; for HIP, a registration's or module's AMDGPU code object, kind
 * "code-object", read again from the registered bundle on first request, CCOB ones decompressed); KIR_CODE_PTX, the PTX
 * of the same registration that suits this device (the launched image when that is PTX). Returns 1 and fills `out`, or
 * 0 when there is none: the image holds none, it could not be decoded (a failure, see KIR_HOOK_LOG), or the kernel is
 * `unloaded` (refused even when its bytes were handed out before; those are freed once fatbin_unregistered returns). */
#define KIR_CODE_LAUNCHED 0
#define KIR_CODE_PTX 1
/* kir_hook_code is the caller's memory, filled by the layer: its four fields are
 * frozen (an older client's struct has no room for more). Anything a later API
 * says of code comes through a new call whose struct carries struct_size, as
 * kir_hook_stats does. */
typedef struct kir_hook_code {
  const void* bytes;
  size_t size;
  const char* kind; /* "cubin" or "ptx"; HIP: "code-object" (a registration's or a module's
                       chosen code object, its target-id as `arch`) */
  const char* arch; /* "sm_90"; "" for an image loaded through the driver API */
} kir_hook_code;
int kir_hook_kernel_code(const kir_hook_kernel* kernel, int which, kir_hook_code* out);

/** API 3. Relocatable device code (nvcc -rdc=true): the linked binary the
 *  runtime registers (__cudaRegisterLinkedBinary_*: the device-linked fatbin,
 *  `.nv_fatbin`, holding the linked cubin and no PTX) lists each translation
 *  unit's relocatable fatbin (`__nv_relfatbin`). A kernel of such a
 *  registration is rebuilt from PTX by linking every unit's PTX (nvJitLink or
 *  the driver linker). kir_hook_kernel_code_units: how many units the kernel's
 *  registration lists, in link order (0: not device-linked, or `unloaded`).
 *  kir_hook_kernel_code_unit: the PTX of unit `index` that suits this device
 *  (the newest not above it; kind "ptx", `arch` its target), decoded on first
 *  request; 1 and `out` filled, or 0 when the unit holds none, could not be
 *  read (a failure, see KIR_HOOK_LOG), `index` is past the last, or the kernel
 *  is `unloaded`. Bytes valid as kir_hook_kernel_code's. */
size_t kir_hook_kernel_code_units(const kir_hook_kernel* kernel);
int kir_hook_kernel_code_unit(const kir_hook_kernel* kernel, size_t index, kir_hook_code* out);

/** API 4. The LLVM IR a kernel's code is built from, as the Proteus pass embedded
 *  it in the image the layer chose to launch (cubin or PTX; AMDGPU code object):
 *  the modules its static hash covers (kir/hash/kernel_code.hpp: the kernel's own
 *  module, else every translation-unit module of the image — with relocatable
 *  device code one per unit, in image order). kir_hook_kernel_ir_count: how many
 *  (0: none embedded, or `unloaded`); kir_hook_kernel_ir: module `index`'s
 *  bitcode, 1 and `out` filled, or 0 (past the last, or `unloaded`). Bytes valid
 *  as kir_hook_kernel_code's; `kir extract` and kir.ir give the same bytes. */
size_t kir_hook_kernel_ir_count(const kir_hook_kernel* kernel);
int kir_hook_kernel_ir(const kir_hook_kernel* kernel, size_t index, kir_bytes* out);

/** API 4. The CUDA driver's own entry point `name` (as libcuda.so.1 exports it:
 *  "cuMemAlloc_v2"), never the layer's interposer; NULL when libcuda.so.1 cannot be
 *  loaded or lacks it. A client that calls the driver for itself (its own
 *  allocations, copies, launches) must take its entry points from here: since
 *  API 4 a dlsym() of libcuda by handle hands out the layer's interposers (so
 *  that libraries which reach the driver that way, cuFFT, are seen), and the
 *  client's own calls would be reported as the app's. */
void* kir_hook_driver_symbol(const char* name);

/** API 11. The same for the runtime of `vendor` (KIR_HOOK_VENDOR_*, e.g. a launch's
 *  kir_hook_launch.vendor): CUDA: as kir_hook_driver_symbol; HIP: `name` in the HIP
 *  runtime the app loaded (libamdhip64.so.7, .6, .5 or libamdhip64.so: "hipMemcpyDtoH"),
 *  never the layer's interposer; NULL for another vendor, when the runtime is not
 *  loaded, or lacks `name`. */
void* kir_hook_vendor_symbol(int vendor, const char* name);

/** Call `visit` for every live allocation, in address order, under the
 *  tracker's reader lock: `visit` must not allocate, free or track. */
void kir_hook_for_each_allocation(void (*visit)(void* user, const kir_hook_allocation* allocation), void* user);

/** Install a client allocator (one per process): 0, or -1 when one is installed already. */
int kir_hook_set_allocator(const kir_hook_allocator* allocator);

/** Add a client (at most 16 per process); returns 0, or -1 when the struct is
 *  too old or the table is full. Clients cannot be removed. */
int kir_hook_add_client(const kir_hook_client* client);

/** The live allocation holding `address`, if any. Returns 1 and fills `out`, else 0. */
int kir_hook_find_allocation(uint64_t address, kir_hook_allocation* out);

/** Attach a client's `tag` to the live allocation holding `address` (replacing
 *  any earlier tag). Returns 1, or 0 when no live allocation holds it. */
int kir_hook_tag_allocation(uint64_t address, void* tag);

/** API 8: the app's annotation (kir/record.h, kir_record_annotate) of the
 *  allocation starting at `address`. Returns 1 and fills `out` (set its
 *  struct_size; `out->tag` is "" for none, valid until the allocation is freed
 *  or annotated again), else 0. */
struct kir_record_annotation;
int kir_hook_allocation_annotation(uint64_t address, struct kir_record_annotation* out);

/** Counts of what the layer has seen (for tests and tools). Set `struct_size`
 *  to sizeof(kir_hook_stats) as compiled; the layer fills that much.
 *  fatbins, kernels, globals: those registered and not unloaded. */
typedef struct kir_hook_stats {
  uint32_t struct_size;
  uint64_t fatbins, kernels, globals, live_allocations, launches;
  /* API 2: */
  uint64_t failures;     /* items the layer could not use (see "Errors" above) */
  uint64_t unregistered; /* fatbins and modules unregistered or unloaded */
  /* API 4: */
  uint64_t handled;             /* launches a client handled (KIR_LAUNCH_HANDLED) */
  uint64_t substituted;         /* launches of a client's substitute (KIR_LAUNCH_SUBSTITUTED) */
  uint64_t substitute_loads;    /* substitute code images loaded (once per context and id) */
  uint64_t substitute_failures; /* claims whose substitute could not be launched (also in failures) */
} kir_hook_stats;
void kir_hook_get_stats(kir_hook_stats* out);
/** API 6. Of kir_hook_stats.failures, those that were libkir's own error of
 *  `code` (KIR_ERROR_*, kir.h: a fatbin, module or image it could not parse, as
 *  kir_last_error_code would name it); other failures (a client, a substitute)
 *  have no code and are counted under none. 0 for KIR_ERROR_NONE and unknown codes. */
uint64_t kir_hook_failure_count(uint32_t code);

/* ---- API 7 (the Proteus ABI): lambda captures, one registration's globals ---- */

/** API 7. The runtime constants captured by the lambdas `kernel` calls, as
 *  CAPTURE records for kir_jit_key_input.captures (kir.h kir_jit_capture).
 *  Proteus-built apps register them from the host: `proteus::jit_variable(v)` in a
 *  lambda's capture list calls __proteus_register_variable(RuntimeConstant, lambda
 *  type) and `proteus::register_lambda(f)` calls __proteus_register_lambda(lambda
 *  type) (Proteus include/proteus/JitInterface.h; the pass puts the demangled lambda
 *  type in both, src/pass/ProteusPass.cpp registerJitVariablesWithLambda,
 *  registerLambdaFunctions). The layer interposes both (and forwards them to the
 *  Proteus runtime when it is loaded) and keeps, per lambda type, the values of
 *  its latest register_lambda that followed new jit_variable calls, as Proteus's
 *  LambdaRegistry does.
 *  A kernel calls the lambdas of type T whose call operator `T::operator()` is a
 *  function of the kernel's embedded IR (the modules kir_hook_kernel_ir lists), as
 *  Proteus's JitEngineDevice::getLambdaJitValues matches the functions of the
 *  kernel's module (LambdaRegistry::matchJitVariableMap); and those whose type T
 *  is named in the kernel's demangled name (a kernel templated on the lambda, with
 *  or without IR). Records come by lambda type (in the order the types were first
 *  registered), then in jit_variable call order: `lambda` the demangled type, `slot`
 *  and `offset` the RuntimeConstant's Pos and Offset, `type` a kir_arg_type,
 *  `value`/`size` the value's bytes. Returns how many records there are and fills
 *  the first min(that, capacity) of `out` (NULL with capacity 0: only count); 0
 *  for NULL, an unloaded kernel or one with none. `lambda` and `value` point into
 *  the layer's memory, valid for the process's life (each distinct set of values
 *  is kept once). The values are those registered when this is called: call it at
 *  each launch. */
size_t kir_hook_kernel_captures(const kir_hook_kernel* kernel, kir_jit_capture* out, size_t capacity);

/** API 7. The device variables registered with the live registration `fatbin`
 *  (a kir_hook_kernel.fatbin / kir_hook_global.fatbin handle), each once, in
 *  registration order: a variable registered twice — the runtime's
 *  __cudaRegisterVar / __hipRegisterVar and the Proteus pass's
 *  __proteus_register_var — is one global. Returns their count and fills the
 *  first min(count, capacity) of `out` (views valid for the process's life); 0
 *  when `fatbin` is not a live registration. */
size_t kir_hook_fatbin_globals(const void* fatbin, const kir_hook_global** out, size_t capacity);

/** API 10. Proteus's 64-bit static hash of `kernel`, as Proteus's runtime computes
 *  it at the registration of a HIP code object its pass built (JitEngineDeviceHIP
 *  getModuleHash: the fold of the numbers the `.jit.bitcode*` section names end
 *  in, then JITKernelInfo::createStaticHash with the mangled name; docs/hashing.md,
 *  "Proteus compatibility"), over the code object the layer chose for the kernel:
 *  the value `kir hash --proteus` prints offline for the same binary. Proteus's
 *  hash function is XXH3-64 when it was built with LLVM >= 20
 *  (`llvm20_or_newer` 1), else FNV-1a 64. Returns 1 and fills `out`; 0 for NULL,
 *  an unloaded kernel, or code without such sections (CUDA registrations: not
 *  computed by the layer, whose hash covers device memory Proteus reads back). */
int kir_hook_kernel_proteus_hash(const kir_hook_kernel* kernel, int llvm20_or_newer, uint64_t* out);

#ifdef __cplusplus
}
#endif

#endif /* KIR_HOOKS_H */
