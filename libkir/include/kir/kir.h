/* kir — kernel IR library: the C ABI.
 *
 * Stable entry points for C, C++ and FFI users (Proteus, Mneme). Every
 * function that can fail returns a status (0 = success) or NULL, and leaves a
 * message in kir_last_error() for the calling thread, with its kind in
 * kir_last_error_code() and, when it is about a byte of the input, that byte's
 * offset in kir_last_error_offset().
 *
 * Structs that cross the ABI start with `struct_size`: the caller sets it to
 * sizeof(the struct it was compiled with) and kir fills only that much, so
 * older callers keep working when fields are added at the end.
 *
 * Versions (docs/abi.md): KIR_ABI_VERSION counts the additions to this header
 * (functions, constants, appended fields; nothing is removed or changed); a
 * caller compiled against ABI N runs with any libkir whose kir_abi_version()
 * is N or more. docs/abi.md lists what each version added. KIR_VERSION_* is
 * the library's release, libkir.so's SONAME its major.
 */
#ifndef KIR_KIR_H
#define KIR_KIR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KIR_VERSION_MAJOR 0
#define KIR_VERSION_MINOR 1
#define KIR_VERSION_PATCH 0

/** "0.1.0": the library's version. */
const char* kir_version(void);

/** Message of the calling thread's last failed call ("" if none). */
const char* kir_last_error(void);

/* ---- Since ABI 9: the ABI version, error codes ---------------------------- */

/** This header's ABI version (docs/abi.md). */
#define KIR_ABI_VERSION 11

/** The ABI version of the libkir running (KIR_ABI_VERSION as it was built): a
 *  caller compiled against a higher KIR_ABI_VERSION must not call what that
 *  version added. */
uint32_t kir_abi_version(void);

/** kir_last_error_code(): what kind of failure the calling thread's last
 *  failed call was (kir/support/error.hpp ErrorCode; Python's kir.errors
 *  ErrorCode and the KirError subclass of each). Never renumbered. */
#define KIR_ERROR_NONE 0                /* no failure yet */
#define KIR_ERROR_BAD_MAGIC 1           /* not the format asked for (wrong or no magic) */
#define KIR_ERROR_TRUNCATED 2           /* the data ends inside a structure that must be whole */
#define KIR_ERROR_OUT_OF_BOUNDS 3       /* an offset, size, count or index points outside its buffer */
#define KIR_ERROR_MALFORMED 4           /* a field holds a value the format does not allow */
#define KIR_ERROR_UNSUPPORTED_VERSION 5 /* a format version this kir does not read */
#define KIR_ERROR_UNSUPPORTED 6         /* valid, but not read by kir (ELF32, an unknown codec) */
#define KIR_ERROR_CORRUPT 7             /* a checksum or hash does not match the bytes */
#define KIR_ERROR_TOO_LARGE 8           /* over a limit kir enforces */
#define KIR_ERROR_IO 9                  /* the system failed a read, write, open or map */
#define KIR_ERROR_PERMISSION 10         /* refused by permissions or by kir's trust rules */
#define KIR_ERROR_NOT_FOUND 11          /* no such file, group, image, kernel, entry */
#define KIR_ERROR_INVALID_ARGUMENT 12   /* the caller's mistake: NULL, index out of range, struct_size */
#define KIR_ERROR_INTERNAL 13           /* anything else (a driver's or a library's failure) */

/** The calling thread's last failure: KIR_ERROR_* (KIR_ERROR_NONE if none). */
int kir_last_error_code(void);

/** kir_last_error_offset() when the failure is not about a byte of the input. */
#define KIR_NO_OFFSET UINT64_MAX

/** The byte offset the last failure is about (the offending field's, in the
 *  file — for a compressed image, in the decompressed image; the message names
 *  it too), or KIR_NO_OFFSET. */
uint64_t kir_last_error_offset(void);

typedef struct kir_binary kir_binary;

/** Flags for kir_binary_open. */
#define KIR_OPEN_SCAN 0x1u /* also find containers by magic in every section */
/* ABI 11: read only what sections and wrappers name. Without it, kir_binary_open
 * also searches an ELF's data sections (.rodata, .data, .ldata, ...) for CUDA
 * fatbins by their magic, as cuFFT embeds its fatbins there. */
#define KIR_OPEN_SECTIONS_ONLY 0x2u

/** Open and index a binary. NULL on error (see kir_last_error). */
kir_binary* kir_binary_open(const char* path, unsigned flags);
void kir_binary_close(kir_binary* binary);

/** Number of device images (entries of all containers, in file order). */
size_t kir_binary_image_count(const kir_binary* binary);

/** Deprecated: a CUDA fatbin entry's raw kind, kir_image_info.kind. The same idea
 *  as kir_image_info.image_kind (KIR_KIND_*), numbered otherwise and only for fatbin
 *  entries; use image_kind. Kept, with these values, for the ABI. */
#define KIR_IMAGE_PTX 1
#define KIR_IMAGE_CUBIN 2
#define KIR_IMAGE_OLD_CUBIN 4
#define KIR_IMAGE_LTO_IR 8

/** kir_image_info.image_kind: what an image is, whatever holds it (kir/model.hpp
 *  ImageKind; the names are kind_name's). Values are never renumbered. */
#define KIR_KIND_UNKNOWN 0
#define KIR_KIND_CUBIN 1
#define KIR_KIND_PTX 2
#define KIR_KIND_LTO_IR 3
#define KIR_KIND_OLD_CUBIN 4
#define KIR_KIND_CODE_OBJECT 5
#define KIR_KIND_BITCODE 6
#define KIR_KIND_FATBIN 7
#define KIR_KIND_SPIRV 8
#define KIR_KIND_OBJECT 9
#define KIR_KIND_HOST 10
#define KIR_KIND_EMPTY 11

/** kir_image_info.target_kind: the target's family (kir/model.hpp TargetKind). */
#define KIR_TARGET_NONE 0
#define KIR_TARGET_CUDA 1
#define KIR_TARGET_AMDGPU 2
#define KIR_TARGET_HOST 3

/** kir_image_info.compression (kir/model.hpp Codec's first values). */
#define KIR_COMPRESSION_NONE 0
#define KIR_COMPRESSION_LZ4 1
#define KIR_COMPRESSION_ZSTD 2
#define KIR_COMPRESSION_UNKNOWN 3

typedef struct kir_image_info {
  uint32_t struct_size;  /* in: sizeof(kir_image_info) */
  uint32_t container;    /* container index */
  uint32_t entry;        /* image index in its container */
  uint16_t kind;         /* deprecated (use image_kind): CUDA fatbin images' raw entry kind,
                            KIR_IMAGE_*; 0 for other containers. Kept for the ABI */
  uint16_t major, minor; /* CUDA: code version */
  uint32_t arch;         /* CUDA: SM number (75, 80, 90 ...); 0 otherwise */
  uint32_t compression;  /* KIR_COMPRESSION_* */
  uint64_t flags;        /* CUDA: raw entry flags */
  uint64_t file_offset;  /* of the stored bytes; UINT64_MAX when not stored as is in the file */
  uint64_t stored_size;  /* bytes stored (compressed size when compressed) */
  uint64_t image_size;   /* bytes once decompressed */
  int32_t obfuscated;    /* 1 for obfuscated LTO-IR */
  /* since ABI 2: valid until kir_binary_close */
  const char* kind_name; /* "cubin", "ptx", "lto-ir", "code-object", "bitcode", "host" ... */
  const char* target;    /* "sm_90", "gfx90a:xnack+", "" */
  const char* triple;    /* "nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa-", "" */
  /* since ABI 4: kind_name and the target's family as numbers */
  uint32_t image_kind;  /* KIR_KIND_*, any container (kind_name is its name) */
  uint32_t target_kind; /* KIR_TARGET_* */
} kir_image_info;

/** Describe image `index`. Returns 0, or -1 with kir_last_error set. */
int kir_binary_image_info(const kir_binary* binary, size_t index, kir_image_info* out);

/** Copy image `index`, decompressed, into `buffer` (up to `capacity` bytes).
 *  Returns the image size (call with capacity 0 to ask), or -1 on error. */
int64_t kir_binary_read_image(const kir_binary* binary, size_t index, void* buffer, size_t capacity);

typedef struct kir_kernel_info {
  uint32_t struct_size; /* in: sizeof(kir_kernel_info) */
  const char* name;     /* mangled; valid until kir_binary_close */
  uint32_t param_count;
  int64_t param_bytes;  /* -1 when unknown */
  int32_t registers;    /* -1 when unknown */
  int64_t shared_bytes; /* static shared memory, -1 when unknown */
} kir_kernel_info;

typedef struct kir_kernel_param {
  uint32_t struct_size; /* in: sizeof(kir_kernel_param) */
  uint32_t ordinal;
  uint32_t offset;
  uint32_t size;
} kir_kernel_param;

/** Kernels of image `index` (decoding it on first use). Returns the count, or -1. */
int64_t kir_binary_kernel_count(const kir_binary* binary, size_t index);
int kir_binary_kernel_info(const kir_binary* binary, size_t index, size_t kernel, kir_kernel_info* out);
int kir_binary_kernel_param(const kir_binary* binary, size_t index, size_t kernel, size_t param, kir_kernel_param* out);

/* ---- Kernel hashes (docs/hashing.md) ------------------------------------ */

/** A 128-bit hash; text form: 32 lowercase hex digits, high half first. */
typedef struct kir_hash128 {
  uint64_t high;
  uint64_t low;
} kir_hash128;

typedef struct kir_bytes {
  const void* data;
  size_t size;
} kir_bytes;

/** The LLVM IR a kernel's code is built from, as the Proteus pass embedded it in
 *  image `index`: the modules its static hash covers (the kernel's own module,
 *  else every translation-unit module of the image — one per unit with
 *  relocatable device code — in image order; kir/hash/kernel_code.hpp), the same
 *  policy and bytes as the hook's kir_hook_kernel_ir. kir_binary_kernel_ir_count:
 *  how many (0: none embedded), or -1. kir_binary_kernel_ir: module `module`'s
 *  bitcode in `out` (valid until kir_binary_close); 0, or -1. */
int64_t kir_binary_kernel_ir_count(const kir_binary* binary, size_t index, size_t kernel);
int kir_binary_kernel_ir(const kir_binary* binary, size_t index, size_t kernel, size_t module, kir_bytes* out);

/** Code kinds (since ABI 9): what a static hash covers (kir/model.hpp CodeKind; the names are
 *  "unknown", "ir", "cubin", "ptx", "code-object"). Values are never renumbered. */
#define KIR_CODE_KIND_UNKNOWN 0
#define KIR_CODE_KIND_IR 1
#define KIR_CODE_KIND_CUBIN 2
#define KIR_CODE_KIND_PTX 3
#define KIR_CODE_KIND_CODE_OBJECT 4

/** Static hash of kernel `name` (mangled) whose code is `modules` (IR modules in
 *  any order, or one device image) of `code_kind` ("ir", "cubin", "ptx", "code-object").
 *  kir_static_hash_of_kind takes the code kind as a number. */
kir_hash128 kir_static_hash(const char* name, const char* code_kind, const kir_bytes* modules, size_t count);
/** The same with `code_kind` a KIR_CODE_KIND_* value (since ABI 9); a value that is none: {0, 0} with
 *  kir_last_error set. */
kir_hash128 kir_static_hash_of_kind(const char* name, uint32_t code_kind, const kir_bytes* modules, size_t count);

#ifdef __cplusplus
#define KIR_ALIGN64 alignas(64)
#else
#define KIR_ALIGN64 _Alignas(64)
#endif

/** Builder of a JIT key or a launch identity (docs/hashing.md): allocation-free,
 *  lives on the caller's stack. */
typedef struct kir_dynamic_hash {
  KIR_ALIGN64 unsigned char opaque[1280];
} kir_dynamic_hash;

/** Argument types of kir_dynamic_hash_arg (the ARG record's type byte): kir/model.hpp
 *  ArgType's values, whose names ("i8" ... "bf16", "bool") and sizes live there. */
enum kir_arg_type {
  KIR_ARG_I8 = 1,
  KIR_ARG_I16,
  KIR_ARG_I32,
  KIR_ARG_I64,
  KIR_ARG_U8,
  KIR_ARG_U16,
  KIR_ARG_U32,
  KIR_ARG_U64,
  KIR_ARG_F16,
  KIR_ARG_BF16,
  KIR_ARG_F32,
  KIR_ARG_F64,
  KIR_ARG_PTR,
  KIR_ARG_BYTES,
  KIR_ARG_BOOL
};

/** A kernel's runtime-constant argument: one the JIT specializes on (Proteus:
 *  RuntimeConstantInfo, from __proteus_create_runtime_constant_info_* and
 *  __proteus_register_function; or from IR annotations). */
/* kir_jit_arg_kind: kir/model.hpp JitArgKind's values ("scalar", "array", "object", "vector").
 * KIR_JIT_VECTOR (since ABI 10): Proteus's VECTOR, a vector-typed argument (`<N x T>`) whose
 * `count` elements of `type` are its own bytes (by_value 1); until ABI 9 it was a KIR_JIT_ARRAY
 * with by_value 1, which now means STATIC_ARRAY (`[N x T]`) alone. Its JIT key is encoded as a
 * by-value array's (docs/hashing.md): the same key as before. */
enum kir_jit_arg_kind { KIR_JIT_SCALAR = 0, KIR_JIT_ARRAY = 1, KIR_JIT_OBJECT = 2, KIR_JIT_VECTOR = 3 };
typedef struct kir_jit_arg {
  uint32_t position;       /* 1-based kernel parameter position (the ARG record's) */
  uint8_t kind;            /* kir_jit_arg_kind */
  uint8_t type;            /* kir_arg_type: the scalar's; an array's elements'; KIR_ARG_BYTES for objects */
  uint8_t by_value;        /* objects: 1 passed by value (the argument's bytes are the object),
                              0 by pointer (the object is read through it); arrays: 1 the
                              elements are the argument's own bytes (Proteus STATIC_ARRAY;
                              a KIR_JIT_VECTOR always), 0 they are read through a pointer (ARRAY) */
  uint8_t count_type;      /* arrays of run-time size: kir_arg_type of the argument holding the count */
  uint32_t count;          /* arrays of constant size: element count; objects: size in bytes */
  uint32_t count_position; /* arrays of run-time size: 1-based position of the argument holding
                              the element count; 0 when `count` is the constant count */
} kir_jit_arg;

/** Begin a JIT key: HEADER("kir.jit-key", 2), STATIC, ARCH. Then, in this order:
 *  _arg (by increasing position), _capture, _specialize, _grid, _block, _bounds
 *  (each only when its SPECIALIZE flag is set), _shared, _config. */
void kir_dynamic_hash_begin(kir_dynamic_hash* h, kir_hash128 static_hash, const char* arch);
/** Begin a launch identity: HEADER("kir.launch-identity", 2), STATIC, ARCH; then
 *  _arg (every argument, type KIR_ARG_BYTES), _grid, _block, _shared. */
void kir_launch_identity_begin(kir_dynamic_hash* h, kir_hash128 static_hash, const char* arch);
/** Continue from `prefix`, a builder begun for one kernel and device that holds only
 *  the records every launch shares (HEADER, STATIC, ARCH): copies the bytes written
 *  so far into `h` (which needs no begin) and leaves `prefix` as it was, to be reused.
 *  No allocation, no hashing: the per-launch hot path. */
void kir_dynamic_hash_extend(kir_dynamic_hash* h, const kir_dynamic_hash* prefix);
/** `position` is 1-based; add arguments by increasing position. */
void kir_dynamic_hash_arg(kir_dynamic_hash* h, uint32_t position, uint8_t type, const void* value, size_t size);
void kir_dynamic_hash_grid(kir_dynamic_hash* h, uint32_t x, uint32_t y, uint32_t z);
void kir_dynamic_hash_block(kir_dynamic_hash* h, uint32_t x, uint32_t y, uint32_t z);
void kir_dynamic_hash_bounds(kir_dynamic_hash* h, uint32_t max_threads, uint32_t min_blocks);
void kir_dynamic_hash_config(kir_dynamic_hash* h, const char* key, const void* value, size_t size);
/** SHARED: dynamic shared memory bytes. */
void kir_dynamic_hash_shared(kir_dynamic_hash* h, uint64_t bytes);
/** SPECIALIZE: KIR_SPECIALIZE_* flags of the GRID/BLOCK/BOUNDS records that follow. */
#define KIR_SPECIALIZE_GRID 1u
#define KIR_SPECIALIZE_BLOCK 2u
#define KIR_SPECIALIZE_BOUNDS 4u
void kir_dynamic_hash_specialize(kir_dynamic_hash* h, uint32_t flags);
/** CAPTURE: a lambda's captured runtime constant (see kir_jit_capture). */
void kir_dynamic_hash_capture(kir_dynamic_hash* h, const char* lambda, uint32_t slot, uint32_t offset, uint8_t type,
                              const void* value, size_t size);
/** The hash; ends the builder (begin or extend it again to reuse the storage). */
kir_hash128 kir_dynamic_hash_finish(kir_dynamic_hash* h);

/* ---- The JIT key and the launch identity (docs/hashing.md) ------------- */

/** One CONFIG record: a compile-configuration item (opt level, pipeline text,
 *  codegen options, plugin fingerprints, ...). Its bytes are `size` bytes at `value`. */
typedef struct kir_config_item {
  const char* key;
  const void* value;
  size_t size;
} kir_config_item;

/** One CAPTURE record: a runtime-constant value captured by a lambda the kernel
 *  calls (Proteus: a `jit_variable` registered for lambda type `lambda` with
 *  __proteus_register_variable; `slot` and `offset` its RuntimeConstant's Pos and
 *  Offset). */
typedef struct kir_jit_capture {
  const char* lambda; /* the lambda's type name, as the client identifies it */
  uint32_t slot;      /* the capture's index */
  uint32_t offset;    /* its byte offset in the closure */
  uint8_t type;       /* kir_arg_type */
  const void* value;
  size_t size;
} kir_jit_capture;

/** ABI 10. One runtime-constant argument's value as kir_jit_key hashed it (its ARG
 *  record's bytes): kir_jit_key_input.values. */
typedef struct kir_jit_value {
  uint32_t position;   /* 1-based, the kir_jit_arg's */
  uint8_t kind;        /* the kir_jit_arg's kir_jit_arg_kind */
  uint8_t type;        /* the kir_jit_arg's kir_arg_type */
  uint8_t from_memory; /* 1: read through read_memory at the pointer the argument holds;
                          0: the argument's own bytes (scalars, by-value arrays and objects) */
  uint8_t reserved;
  uint64_t count;    /* scalars: 1; arrays: elements (the run-time count where it is one); objects: bytes */
  const void* bytes; /* in kir_jit_key_input.value_bytes */
  uint64_t size;     /* bytes */
} kir_jit_value;

/** Everything a kernel's JIT key covers, as a launch gives it. */
typedef struct kir_jit_key_input {
  uint32_t struct_size; /* sizeof(kir_jit_key_input) as the caller was compiled */
  kir_hash128 static_hash;
  const char* arch;            /* the device's: "sm_90", "gfx90a:xnack+" */
  void* const* args;           /* args[i]: the bytes of parameter i+1 (kir_hook_launch.args) */
  const uint32_t* param_sizes; /* param_sizes[i]: its size (kir_hook_kernel.param_sizes); may be
                                  NULL, then scalars take their type's size */
  uint32_t param_count;
  const kir_jit_arg* jit_args; /* the runtime-constant arguments, any order (sorted by position) */
  size_t jit_arg_count;
  uint32_t grid[3], block[3];
  uint64_t shared_bytes;                 /* dynamic shared memory */
  int specialize_grid, specialize_block; /* non-zero: the GRID / BLOCK record enters */
  uint32_t max_threads, min_blocks;      /* launch bounds; 0,0: no bounds */
  const kir_config_item* config;         /* CONFIG records, in this (client-fixed) order */
  size_t config_count;
  /* reads `size` bytes of device (or managed) memory at `address` into `out`; 0 = ok.
     Needed for arrays and objects passed by pointer; may be NULL when there are none */
  int (*read_memory)(void* user, uint64_t address, void* out, size_t size);
  void* user;
  /* appended after `user` (a smaller struct_size leaves them out: none, NULL; ABI 6): */
  const kir_jit_capture* captures; /* CAPTURE records, in this (client-fixed) order */
  size_t capture_count;
  const kir_dynamic_hash* prefix; /* optional: a builder begun with kir_dynamic_hash_begin
                                     for this static hash and arch (then `static_hash` and
                                     `arch` are not read): saves re-encoding them */
  /* since ABI 8: */
  const void* config_records; /* optional: the CONFIG records already encoded by
                                 kir_jit_config_records (then `config` must be NULL
                                 and config_count 0): a client's fixed options,
                                 encoded once instead of at every launch */
  size_t config_records_size;
  /* since ABI 10 (optional; a smaller struct_size or a NULL `values`: none are returned):
     the values the key hashed, for a client that specializes on them — arrays and
     objects behind pointers read through read_memory once, for the key and for the
     client. Outputs: the pointers are the caller's memory, kir_jit_key writes through them. */
  kir_jit_value* values; /* room for jit_arg_count entries: filled by increasing position */
  void* value_bytes;     /* the values' bytes are copied here, each at an offset (from value_bytes) aligned to 16 */
  size_t value_bytes_capacity; /* its size; too small: kir_jit_key fails before reading anything
                                  (KIR_ERROR_TOO_LARGE) and sets *value_bytes_size to the size needed */
  size_t* value_bytes_size;    /* optional: set to the bytes the values need (success or not) */
} kir_jit_key_input;

/** The CONFIG records of `items` (in this order) as the JIT key encodes them, for
 *  kir_jit_key_input.config_records: written to `out` when `capacity` suffices.
 *  Returns the size they need (call with capacity 0 to ask), or 0 with
 *  kir_last_error set (a NULL key, or a NULL value with a non-zero size). */
size_t kir_jit_config_records(const kir_config_item* items, size_t count, void* out, size_t capacity);

/** The JIT key of one launch (docs/hashing.md, "JIT key"). Each runtime-constant
 *  argument enters as one ARG record (position, its kir_jit_arg.type, value bytes):
 *    KIR_JIT_SCALAR  the argument's bytes (its type's size; KIR_ARG_BYTES: param_sizes);
 *    KIR_JIT_ARRAY   `count` elements of `type` (or as many as the argument at
 *                    `count_position`, of type `count_type`, holds), read through
 *                    read_memory at the pointer the argument holds — or, with
 *                    `by_value` (Proteus STATIC_ARRAY), the argument's own bytes;
 *    KIR_JIT_VECTOR  `count` elements of `type`, the argument's own bytes (as a by-value array);
 *    KIR_JIT_OBJECT  `count` bytes, the argument's own bytes when `by_value`, else read
 *                    through read_memory at the pointer it holds.
 *  Allocation-free; arrays and objects are read in pieces through a 4 KiB stack buffer.
 *  Returns 0, or -1 with kir_last_error set (a position outside the parameters, two
 *  arguments at one position, a NULL argument, pointer or read_memory where one is
 *  needed, a failed read, a negative count). */
int kir_jit_key(const kir_jit_key_input* in, kir_hash128* out);

/** The launch identity: what a recorder deduplicates launches on (static hash, arch,
 *  every argument's bytes — args[i] of param_sizes[i] bytes, NULL ones left out —,
 *  grid, block, dynamic shared memory). The hook layer's kir_hook_launch.launch_identity. */
kir_hash128 kir_launch_identity(kir_hash128 static_hash, const char* arch, void* const* args,
                                const uint32_t* param_sizes, uint32_t param_count, const uint32_t grid[3],
                                const uint32_t block[3], uint64_t shared_bytes);

/** Writes 32 hex digits and a NUL into `out` (33 bytes). */
void kir_hash_to_hex(kir_hash128 hash, char out[33]);
/** Parses exactly 32 lowercase hex digits. Returns 0, or -1 (kir_last_error set). */
int kir_hash_from_hex(const char* text, kir_hash128* out);

/** Proteus's current 64-bit static hash (migration of existing caches/records):
 *  `llvm20_or_newer` selects XXH3-64 (LLVM >= 20 builds) or FNV-1a (older). */
uint64_t kir_proteus_static_hash(const char* name, const kir_bytes* modules, size_t count, int llvm20_or_newer);

#ifdef __cplusplus
}
#endif

#endif /* KIR_KIR_H */
