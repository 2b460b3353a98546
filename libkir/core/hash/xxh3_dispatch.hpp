// Private to libkir: the AVX2 build of XXH3-128 (xxh3_avx2.cpp).
#pragma once

#include <cstddef>

#include <xxhash.h>

namespace kir::detail {

#if defined(__x86_64__) && defined(KIR_HAVE_AVX2_XXH3)
XXH128_hash_t xxh3_128_avx2(const void* data, size_t size);
#endif

}  // namespace kir::detail
