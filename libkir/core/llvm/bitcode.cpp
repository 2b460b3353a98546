#include "kir/llvm/bitcode.hpp"

namespace kir {

namespace {

constexpr uint32_t kRawMagic = 0xDEC04342;      // "BC" C0 DE
constexpr uint32_t kWrapperMagic = 0x0B17C0DE;  // DE C0 17 0B
constexpr uint32_t kEnterSubblock = 1;

/// Reads a bitstream LSB-first, the way LLVM writes it.
class BitReader {
 public:
  BitReader(ByteView bytes, uint64_t byte_offset) : bytes_(bytes), bit_(byte_offset * 8) {}

  bool read(unsigned width, uint64_t& out) {
    out = 0;
    for (unsigned i = 0; i < width; ++i, ++bit_) {
      if (bit_ / 8 >= bytes_.size()) return false;
      out |= uint64_t((bytes_.data()[bit_ / 8] >> (bit_ % 8)) & 1) << i;
    }
    return true;
  }

  bool read_vbr(unsigned width, uint64_t& out) {
    out = 0;
    for (unsigned shift = 0; shift < 64; shift += width - 1) {
      uint64_t chunk;
      if (!read(width, chunk)) return false;
      out |= (chunk & ((uint64_t(1) << (width - 1)) - 1)) << shift;
      if (!(chunk >> (width - 1))) return true;
    }
    return false;
  }

  void align32() { bit_ = (bit_ + 31) / 32 * 32; }
  uint64_t byte() const { return bit_ / 8; }
  void skip_bytes(uint64_t n) { bit_ += n * 8; }

 private:
  ByteView bytes_;
  uint64_t bit_;
};

/// Walk the top-level blocks of the module whose magic is at `start`; returns
/// the offset just past its last block (at the next magic, padding or the end).
Expected<uint64_t> module_end(ByteView bytes, uint64_t start, std::vector<uint32_t>* blocks) {
  uint64_t off = start + 4;
  while (off < bytes.size()) {
    if (!bytes.contains(off, 4) || bytes.read<uint32_t>(off) == kRawMagic || bytes.read<uint32_t>(off) == 0) break;
    BitReader r(bytes, off);
    uint64_t abbrev, id, width, words;
    if (!r.read(2, abbrev) || abbrev != kEnterSubblock)
      return Error(ErrorCode::malformed,
                   "bitcode at offset " + hex(bytes.origin(start)) + ": expected a block at offset " +
                       hex(bytes.origin(off)) + ", found abbreviation id " + std::to_string(abbrev),
                   bytes.origin(off));
    if (!r.read_vbr(8, id) || !r.read_vbr(4, width))
      return Error(ErrorCode::truncated, "bitcode block header at offset " + hex(bytes.origin(off)) + " is truncated",
                   bytes.origin(off));
    r.align32();
    if (!r.read(32, words) || !bytes.contains(r.byte(), words * 4))
      return Error(ErrorCode::out_of_bounds,
                   "bitcode block " + std::to_string(id) + " at offset " + hex(bytes.origin(off)) + " claims " +
                       hex(words * 4) + " bytes, past the end of the data",
                   bytes.origin(off));
    if (blocks) blocks->push_back(static_cast<uint32_t>(id));
    off = r.byte() + words * 4;
  }
  return off;
}

}  // namespace

bool is_bitcode(ByteView bytes) {
  return bytes.size() >= 4 && (bytes.read<uint32_t>(0) == kRawMagic || bytes.read<uint32_t>(0) == kWrapperMagic);
}

Expected<std::vector<ByteView>> split_bitcode(ByteView bytes) {
  std::vector<ByteView> modules;
  uint64_t off = 0;
  while (off + 4 <= bytes.size()) {
    uint32_t magic = bytes.read<uint32_t>(off);
    if (magic == 0) {  // padding between or after modules
      off += 4;
      continue;
    }
    if (magic == kWrapperMagic) {
      if (!bytes.contains(off, 20))
        return Error(ErrorCode::truncated,
                     "bitcode wrapper header at offset " + hex(bytes.origin(off)) + " is truncated", bytes.origin(off));
      uint32_t inner = bytes.read<uint32_t>(off + 8), size = bytes.read<uint32_t>(off + 12);
      // The module follows the 20-byte header and is not empty: each wrapper
      // moves `off` forward by at least 24 bytes, so the loop ends.
      if (inner < 20)
        return Error(ErrorCode::malformed,
                     "bitcode wrapper at offset " + hex(bytes.origin(off)) + ": module offset " + hex(inner) +
                         " (byte " + hex(bytes.origin(off + 8)) + ") points into its own 20-byte header",
                     bytes.origin(off + 8));
      if (size < 4)
        return Error(ErrorCode::malformed,
                     "bitcode wrapper at offset " + hex(bytes.origin(off)) + ": module size " + hex(size) + " (byte " +
                         hex(bytes.origin(off + 12)) + ") is too small for a module",
                     bytes.origin(off + 12));
      if (!bytes.contains(off + inner, size))
        return Error(ErrorCode::out_of_bounds,
                     "bitcode wrapper at offset " + hex(bytes.origin(off)) + " points past the data",
                     bytes.origin(off));
      modules.push_back(bytes.sub(off + inner, size));
      off = align_up(off + inner + size, 4);
      continue;
    }
    if (magic != kRawMagic)
      return Error(ErrorCode::bad_magic,
                   "expected bitcode magic 42 43 c0 de at offset " + hex(bytes.origin(off)) + ", found " + hex(magic),
                   bytes.origin(off));
    Expected<uint64_t> end = module_end(bytes, off, nullptr);
    if (!end) return end.error();
    modules.push_back(bytes.sub(off, *end - off));
    off = *end;
  }
  return modules;
}

Expected<uint64_t> bitcode_module_size(ByteView bytes, std::vector<uint32_t>* blocks) {
  if (!bytes.contains(0, 4) || bytes.read<uint32_t>(0) != kRawMagic)
    return Error(ErrorCode::bad_magic, "not raw bitcode (no 42 43 c0 de magic)", bytes.origin(0));
  return module_end(bytes, 0, blocks);
}

Expected<std::vector<uint32_t>> bitcode_blocks(ByteView module) {
  if (!module.contains(0, 4) || module.read<uint32_t>(0) != kRawMagic)
    return Error(ErrorCode::bad_magic, "not raw bitcode (no 42 43 c0 de magic)", module.origin(0));
  std::vector<uint32_t> blocks;
  Expected<uint64_t> end = module_end(module, 0, &blocks);
  if (!end) return end.error();
  return blocks;
}

}  // namespace kir
