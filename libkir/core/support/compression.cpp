#include "kir/support/compression.hpp"

#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <climits>

namespace kir {

uint8_t* Scratch::reserve(uint64_t size) {
  if (size > capacity_) {
    data_.reset(new uint8_t[size]);  // default-initialised: no memset
    capacity_ = size;
  }
  return data_.get();
}

Expected<ByteView> decompress_lz4_block(ByteView src, uint64_t size, Scratch& scratch) {
  if (src.size() > INT_MAX || size > INT_MAX)
    return Error(ErrorCode::too_large,
                 "LZ4 block too large for the LZ4 library (" + hex(src.size()) + " -> " + hex(size) + " bytes)");
  if (size / 255 > src.size() + 16)  // LZ4 expands at most 255:1
    return Error(ErrorCode::malformed, "LZ4 block of " + hex(src.size()) + " bytes cannot decode to the claimed " +
                                           hex(size) + " bytes (LZ4 expands at most 255:1)");
  uint8_t* out = scratch.reserve(size);
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src.data()), reinterpret_cast<char*>(out),
                              static_cast<int>(src.size()), static_cast<int>(size));
  if (n < 0)
    return Error(ErrorCode::malformed, "LZ4 block of " + hex(src.size()) + " bytes is corrupt (decoder error at " +
                                           "input offset " + hex(uint64_t(-(int64_t)n)) + ")");
  if (static_cast<uint64_t>(n) != size)
    return Error(ErrorCode::malformed,
                 "LZ4 block decodes to " + hex(uint64_t(n)) + " bytes, but the header claims " + hex(size));
  return ByteView(out, size);
}

namespace {

/// One zstd context of a kind per thread, reused across calls.
template <class Context, Context* (*create)(), size_t (*destroy)(Context*)>
Context* thread_context() {
  struct Owner {
    Context* ctx = create();
    ~Owner() { destroy(ctx); }
  };
  thread_local Owner owner;
  return owner.ctx;
}

ZSTD_DCtx* thread_zstd_context() { return thread_context<ZSTD_DCtx, ZSTD_createDCtx, ZSTD_freeDCtx>(); }
ZSTD_CCtx* thread_zstd_compressor() { return thread_context<ZSTD_CCtx, ZSTD_createCCtx, ZSTD_freeCCtx>(); }

}  // namespace

Expected<ByteView> decompress_zstd(ByteView src, uint64_t size, Scratch& scratch) {
  unsigned long long framed = ZSTD_getFrameContentSize(src.data(), src.size());
  if (framed == ZSTD_CONTENTSIZE_ERROR)
    return Error(ErrorCode::malformed, "zstd data of " + hex(src.size()) + " bytes does not start with a valid frame");
  if (framed != ZSTD_CONTENTSIZE_UNKNOWN && framed > size)
    return Error(ErrorCode::malformed,
                 "zstd frame holds " + hex(framed) + " bytes, more than the claimed " + hex(size));
  uint8_t* out = scratch.reserve(size);
  size_t n = ZSTD_decompressDCtx(thread_zstd_context(), out, size, src.data(), src.size());
  if (ZSTD_isError(n))
    return Error(ErrorCode::malformed, std::string("zstd data of ") + hex(src.size()) +
                                           " bytes cannot be decoded to the claimed " + hex(size) +
                                           " bytes: " + ZSTD_getErrorName(n));
  if (n != size)
    return Error(ErrorCode::malformed, "zstd data decodes to " + hex(n) + " bytes, but the header claims " + hex(size));
  return ByteView(out, size);
}

Expected<ByteView> decompress_zlib(ByteView src, uint64_t size, Scratch& scratch) {
  // zlib expands at most ~1032:1; a larger claim is corrupt or hostile.
  if (size / 1032 > src.size() + 64)
    return Error(ErrorCode::malformed, "zlib stream of " + hex(src.size()) + " bytes cannot decode to the claimed " +
                                           hex(size) + " bytes (zlib expands at most 1032:1)");
  uint8_t* out = scratch.reserve(size);
  uLongf n = static_cast<uLongf>(size);
  int rc = uncompress(out, &n, src.data(), static_cast<uLong>(src.size()));
  if (rc != Z_OK)
    return Error(ErrorCode::malformed, std::string("zlib stream of ") + hex(src.size()) +
                                           " bytes cannot be decoded to "
                                           "the claimed " +
                                           hex(size) + " bytes: " + zError(rc));
  if (n != size)
    return Error(ErrorCode::malformed,
                 "zlib stream decodes to " + hex(n) + " bytes, but the header claims " + hex(size));
  return ByteView(out, size);
}

Expected<uint64_t> compress_zstd(ByteView src, int level, std::vector<uint8_t>& out, uint64_t offset) {
  size_t bound = ZSTD_compressBound(src.size());
  out.resize(offset + bound);
  ZSTD_CCtx* ctx = thread_zstd_compressor();
  size_t n = ZSTD_compressCCtx(ctx, out.data() + offset, bound, src.data(), src.size(), level);
  if (ZSTD_isError(n))
    return Error(ErrorCode::internal, std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
  out.resize(offset + n);
  return uint64_t(n);
}

}  // namespace kir
