/* kir — kernel IR library: the C ABI.
 *
 * Stable entry points for C, C++ and FFI users (Proteus, Mneme). Every
 * function that can fail returns a status (0 = success) or NULL, and leaves a
 * message in kir_last_error() for the calling thread.
 *
 * Structs that cross the ABI start with `struct_size`: the caller sets it to
 * sizeof(the struct it was compiled with) and kir fills only that much, so
 * older callers keep working when fields are added at the end.
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

typedef struct kir_binary kir_binary;

/** Flags for kir_binary_open. */
#define KIR_OPEN_SCAN 0x1u /* also find containers by magic in every section */

/** Open and index a binary. NULL on error (see kir_last_error). */
kir_binary* kir_binary_open(const char* path, unsigned flags);
void kir_binary_close(kir_binary* binary);

/** Number of device images (entries of all containers, in file order). */
size_t kir_binary_image_count(const kir_binary* binary);

/** Image kinds (the fatbin entry kind). */
#define KIR_IMAGE_PTX 1
#define KIR_IMAGE_CUBIN 2
#define KIR_IMAGE_OLD_CUBIN 4
#define KIR_IMAGE_LTO_IR 8

#define KIR_COMPRESSION_NONE 0
#define KIR_COMPRESSION_LZ4 1
#define KIR_COMPRESSION_ZSTD 2
#define KIR_COMPRESSION_UNKNOWN 3

typedef struct kir_image_info {
  uint32_t struct_size;  /* in: sizeof(kir_image_info) */
  uint32_t container;    /* container index */
  uint32_t entry;        /* image index in its container */
  uint16_t kind;         /* CUDA fatbin images: KIR_IMAGE_*; 0 for other containers */
  uint16_t major, minor; /* CUDA: code version */
  uint32_t arch;         /* CUDA: SM number (75, 80, 90 ...); 0 otherwise */
  uint32_t compression;  /* KIR_COMPRESSION_* */
  uint64_t flags;        /* CUDA: raw entry flags */
  uint64_t file_offset;  /* of the stored bytes; UINT64_MAX when not stored as is in the file */
  uint64_t stored_size;  /* bytes stored (compressed size when compressed) */
  uint64_t image_size;   /* bytes once decompressed */
  int32_t obfuscated;    /* 1 for obfuscated LTO-IR */
  /* since 0.2: valid until kir_binary_close */
  const char* kind_name; /* "cubin", "ptx", "lto-ir", "code-object", "bitcode", "host" ... */
  const char* target;    /* "sm_90", "gfx90a:xnack+", "" */
  const char* triple;    /* "nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa-", "" */
} kir_image_info;

/** Describe image `index`. Returns 0, or -1 with kir_last_error set. */
int kir_binary_image_info(const kir_binary* binary, size_t index, kir_image_info* out);

/** Copy image `index`, decompressed, into `buffer` (up to `capacity` bytes).
 *  Returns the image size (call with capacity 0 to ask), or -1 on error. */
int64_t kir_binary_read_image(const kir_binary* binary, size_t index, void* buffer,
                              size_t capacity);

typedef struct kir_kernel_info {
  uint32_t struct_size;  /* in: sizeof(kir_kernel_info) */
  const char* name;      /* mangled; valid until kir_binary_close */
  uint32_t param_count;
  int64_t param_bytes;   /* -1 when unknown */
  int32_t registers;     /* -1 when unknown */
  int64_t shared_bytes;  /* static shared memory, -1 when unknown */
} kir_kernel_info;

typedef struct kir_kernel_param {
  uint32_t struct_size;  /* in: sizeof(kir_kernel_param) */
  uint32_t ordinal;
  uint32_t offset;
  uint32_t size;
} kir_kernel_param;

/** Kernels of image `index` (decoding it on first use). Returns the count, or -1. */
int64_t kir_binary_kernel_count(const kir_binary* binary, size_t index);
int kir_binary_kernel_info(const kir_binary* binary, size_t index, size_t kernel,
                           kir_kernel_info* out);
int kir_binary_kernel_param(const kir_binary* binary, size_t index, size_t kernel, size_t param,
                            kir_kernel_param* out);

#ifdef __cplusplus
}
#endif

#endif /* KIR_KIR_H */
