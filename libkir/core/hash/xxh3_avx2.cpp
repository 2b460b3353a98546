// XXH3-128 compiled for AVX2 (this file only: -mavx2), chosen at run time by
// xxh3_128() when the CPU has AVX2 and the input is long. The code is the
// system xxhash library's, inlined from its header.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "xxh3_dispatch.hpp"

namespace kir::detail {

XXH128_hash_t xxh3_128_avx2(const void* data, size_t size) { return XXH3_128bits(data, size); }

}  // namespace kir::detail
