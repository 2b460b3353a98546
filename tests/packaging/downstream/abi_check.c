/* Uses kir's C ABI only (kir/kir.h, kir/cache.h): what tests/packaging/test_abi.py asks of it.
 *   abi_check versions            the headers' version macros and the running libkir's
 *   abi_check offsets             offsetof of the fields appended after a struct's first version
 *   abi_check open BINARY         open BINARY and decode every image's kernels
 *   abi_check image BINARY INDEX  kir_binary_image_info of image INDEX
 *   abi_check struct-size BINARY  image 0's info through an ABI 3 caller's struct and a larger one
 *   abi_check cache DIR KEY       open the cache under DIR (existing) and look KEY up
 * A failure prints "error <code> <offset|-> <kir_last_error()>" and exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kir/cache.h>
#include <kir/kir.h>

static int failed(void) {
  uint64_t offset = kir_last_error_offset();
  if (offset == KIR_NO_OFFSET)
    printf("error %d - %s\n", kir_last_error_code(), kir_last_error());
  else
    printf("error %d %llu %s\n", kir_last_error_code(), (unsigned long long)offset, kir_last_error());
  return 2;
}

static kir_binary* open_or_fail(const char* path) {
  kir_binary* binary = kir_binary_open(path, 0);
  if (!binary) exit(failed());
  return binary;
}

#define OFFSET(s, f) printf(#s "." #f " %zu\n", offsetof(s, f))

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "versions") == 0) {
    printf("kir.h %d %u\n", KIR_ABI_VERSION, kir_abi_version());
    printf("cache.h %d %u\n", KIR_CACHE_ABI_VERSION, kir_cache_abi_version());
    printf("release %d.%d.%d %s\n", KIR_VERSION_MAJOR, KIR_VERSION_MINOR, KIR_VERSION_PATCH, kir_version());
    printf("last error %d %d\n", kir_last_error_code(), kir_last_error_offset() == KIR_NO_OFFSET);
    return 0;
  }
  if (strcmp(mode, "offsets") == 0) {
    OFFSET(kir_image_info, kind_name);
    OFFSET(kir_image_info, target);
    OFFSET(kir_image_info, triple);
    OFFSET(kir_image_info, image_kind);
    OFFSET(kir_image_info, target_kind);
    OFFSET(kir_jit_key_input, captures);
    OFFSET(kir_jit_key_input, capture_count);
    OFFSET(kir_jit_key_input, prefix);
    OFFSET(kir_jit_key_input, config_records);
    OFFSET(kir_jit_key_input, config_records_size);
    OFFSET(kir_cache_options, group);
    OFFSET(kir_cache_entry, image_kind);
    return 0;
  }
  if (strcmp(mode, "open") == 0 && argc == 3) {
    kir_binary* binary = open_or_fail(argv[2]);
    for (size_t i = 0; i < kir_binary_image_count(binary); ++i)
      if (kir_binary_kernel_count(binary, i) < 0) return failed();
    printf("ok %zu images\n", kir_binary_image_count(binary));
    kir_binary_close(binary);
    return 0;
  }
  if (strcmp(mode, "image") == 0 && argc == 4) {
    kir_binary* binary = open_or_fail(argv[2]);
    kir_image_info info = {sizeof info};
    if (kir_binary_image_info(binary, (size_t)strtoull(argv[3], NULL, 10), &info) != 0) return failed();
    printf("ok %s\n", info.kind_name);
    kir_binary_close(binary);
    return 0;
  }
  if (strcmp(mode, "struct-size") == 0 && argc == 3) {
    kir_binary* binary = open_or_fail(argv[2]);
    /* An ABI 3 caller's kir_image_info ends after `triple`: kir fills no more. */
    kir_image_info old;
    memset(&old, 0xab, sizeof old);
    old.struct_size = offsetof(kir_image_info, image_kind);
    if (kir_binary_image_info(binary, 0, &old) != 0) return failed();
    printf("old %u %s %d\n", old.struct_size, old.kind_name, old.image_kind == 0xabababab);
    /* A newer caller's, with a field this libkir does not know: left as it was. */
    struct {
      kir_image_info info;
      uint64_t newer;
    } big;
    memset(&big, 0xcd, sizeof big);
    big.info.struct_size = sizeof big;
    if (kir_binary_image_info(binary, 0, &big.info) != 0) return failed();
    printf("new %u %u %d\n", big.info.struct_size, big.info.image_kind, big.newer == 0xcdcdcdcdcdcdcdcdull);
    kir_binary_close(binary);
    return 0;
  }
  if (strcmp(mode, "cache") == 0 && argc == 4) {
    kir_cache_options options = {sizeof options};
    options.flags = KIR_CACHE_OPEN_EXISTING;
    kir_cache* cache = kir_cache_open(argv[2], &options);
    if (!cache) return failed();
    kir_hash128 key;
    if (kir_hash_from_hex(argv[3], &key) != 0) return failed();
    kir_cache_entry entry = {sizeof entry};
    int found = kir_cache_lookup(cache, key, &entry);
    if (found < 0) return failed();
    if (found) printf("hit\n");
    else printf("miss %s\n", kir_cache_last_problem(cache));
    kir_cache_close(cache);
    return 0;
  }
  fprintf(stderr, "usage: %s versions | offsets | open BINARY | image BINARY INDEX | struct-size BINARY | cache DIR KEY\n",
          argv[0]);
  return 64;
}
