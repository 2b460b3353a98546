/* Uses kir's C ABI only: prints one line per image and per kernel.
 *   list_kernels BINARY
 * Output: "image <index> <kind> sm_<arch> <size>" and
 *         "kernel <image index> <mangled name> <param count> <param bytes>". */
#include <stdio.h>
#include <stdlib.h>

#include <kir/kir.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s BINARY\n", argv[0]);
    return 2;
  }
  kir_binary* binary = kir_binary_open(argv[1], 0);
  if (!binary) {
    fprintf(stderr, "error: %s\n", kir_last_error());
    return 2;
  }
  size_t count = kir_binary_image_count(binary);
  for (size_t i = 0; i < count; ++i) {
    kir_image_info info = {sizeof info};
    if (kir_binary_image_info(binary, i, &info) != 0) return 1;
    printf("image %zu %u sm_%u %llu\n", i, info.kind, info.arch,
           (unsigned long long)info.image_size);
    if (info.kind != KIR_IMAGE_CUBIN && info.kind != KIR_IMAGE_PTX) continue;
    int64_t n = kir_binary_kernel_count(binary, i);
    if (n < 0) {
      fprintf(stderr, "error: %s\n", kir_last_error());
      return 1;
    }
    for (int64_t k = 0; k < n; ++k) {
      kir_kernel_info kernel = {sizeof kernel};
      if (kir_binary_kernel_info(binary, i, (size_t)k, &kernel) != 0) return 1;
      printf("kernel %zu %s %u %lld\n", i, kernel.name, kernel.param_count,
             (long long)kernel.param_bytes);
    }
  }
  /* Read the first image through the C ABI, decompressed. */
  if (count > 0) {
    int64_t size = kir_binary_read_image(binary, 0, NULL, 0);
    void* buffer = malloc(size > 0 ? (size_t)size : 1);
    if (size < 0 || kir_binary_read_image(binary, 0, buffer, (size_t)size) != size) return 1;
    printf("read %lld\n", (long long)size);
    free(buffer);
  }
  kir_binary_close(binary);
  return 0;
}
