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

constexpr uint32_t kModuleBlock = 8, kStrtabBlock = 23;
constexpr uint64_t kFunctionRecord = 8, kStrtabBlob = 1;

/// One operand of an abbreviation (DEFINE_ABBREV): a literal, or how a value is encoded.
struct AbbrevOp {
  enum Kind { literal, fixed, vbr, array, char6, blob } kind;
  uint64_t value;  // the literal, or the width
};
using Abbrev = std::vector<AbbrevOp>;

/// A record's code, operands, and its blob (when its abbreviation has one).
struct Record {
  uint64_t code = 0;
  std::vector<uint64_t> ops;
  ByteView blob;
};

Error truncated_at(ByteView bytes, uint64_t at, const char* what) {
  return Error(ErrorCode::truncated,
               std::string("bitcode ") + what + " at offset " + hex(bytes.origin(at)) + " is truncated or malformed",
               bytes.origin(at));
}

bool read_scalar(BitReader& r, const AbbrevOp& op, uint64_t& v) {
  switch (op.kind) {
    case AbbrevOp::literal: v = op.value; return true;
    case AbbrevOp::fixed: return op.value <= 64 && r.read(unsigned(op.value), v);
    case AbbrevOp::vbr: return op.value >= 2 && op.value <= 32 && r.read_vbr(unsigned(op.value), v);
    case AbbrevOp::char6: return r.read(6, v);
    default: return false;
  }
}

/// Read the record abbreviation `a` encodes into `rec`.
bool read_abbreviated(BitReader& r, ByteView bytes, const Abbrev& a, Record& rec) {
  bool first = true;
  auto put = [&](uint64_t v) {
    if (first) rec.code = v, first = false;
    else rec.ops.push_back(v);
  };
  for (size_t i = 0; i < a.size(); ++i) {
    const AbbrevOp& op = a[i];
    uint64_t v;
    if (op.kind == AbbrevOp::array) {
      uint64_t n;
      if (i + 1 >= a.size() || !r.read_vbr(6, n)) return false;
      const AbbrevOp& element = a[++i];
      for (uint64_t k = 0; k < n; ++k) {
        if (!read_scalar(r, element, v)) return false;
        put(v);
      }
    } else if (op.kind == AbbrevOp::blob) {
      uint64_t n;
      if (!r.read_vbr(6, n)) return false;
      r.align32();
      if (!bytes.contains(r.byte(), n)) return false;
      rec.blob = bytes.sub(r.byte(), n);
      r.skip_bytes(n);
      r.align32();
    } else {
      if (!read_scalar(r, op, v)) return false;
      put(v);
    }
  }
  return true;
}

/// Each record of the block whose contents start at `r` (after its header;
/// abbreviation ids `width` bits wide) up to its END_BLOCK, to `visit`; nested
/// blocks skipped by their length.
template <class Visit>
Status read_block(BitReader& r, ByteView bytes, unsigned width, uint64_t start, Visit&& visit) {
  std::vector<Abbrev> abbrevs;
  for (;;) {
    uint64_t id;
    if (!r.read(width, id)) return truncated_at(bytes, start, "block");
    if (id == 0) return {};  // END_BLOCK
    if (id == 1) {           // ENTER_SUBBLOCK: skipped
      uint64_t block, w, words;
      if (!r.read_vbr(8, block) || !r.read_vbr(4, w)) return truncated_at(bytes, start, "block");
      r.align32();
      if (!r.read(32, words) || !bytes.contains(r.byte(), words * 4)) return truncated_at(bytes, start, "block");
      r.skip_bytes(words * 4);
    } else if (id == 2) {  // DEFINE_ABBREV
      uint64_t n, literal, v;
      if (!r.read_vbr(5, n)) return truncated_at(bytes, start, "abbreviation");
      Abbrev a;
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.read(1, literal)) return truncated_at(bytes, start, "abbreviation");
        if (literal) {
          if (!r.read_vbr(8, v)) return truncated_at(bytes, start, "abbreviation");
          a.push_back({AbbrevOp::literal, v});
          continue;
        }
        uint64_t encoding, w = 0;
        if (!r.read(3, encoding) || encoding < 1 || encoding > 5) return truncated_at(bytes, start, "abbreviation");
        if ((encoding == 1 || encoding == 2) && !r.read_vbr(5, w)) return truncated_at(bytes, start, "abbreviation");
        static constexpr AbbrevOp::Kind kinds[] = {AbbrevOp::fixed, AbbrevOp::vbr, AbbrevOp::array, AbbrevOp::char6,
                                                   AbbrevOp::blob};
        a.push_back({kinds[encoding - 1], w});
      }
      abbrevs.push_back(std::move(a));
    } else {
      Record rec;
      if (id == 3) {  // UNABBREV_RECORD
        uint64_t n, v;
        if (!r.read_vbr(6, rec.code) || !r.read_vbr(6, n)) return truncated_at(bytes, start, "record");
        for (uint64_t i = 0; i < n; ++i) {
          if (!r.read_vbr(6, v)) return truncated_at(bytes, start, "record");
          rec.ops.push_back(v);
        }
      } else if (id - 4 >= abbrevs.size() || !read_abbreviated(r, bytes, abbrevs[id - 4], rec)) {
        return truncated_at(bytes, start, "record");
      }
      visit(rec);
    }
  }
}

}  // namespace

Expected<std::vector<std::string>> bitcode_function_names(ByteView module) {
  if (!module.contains(0, 4) || module.read<uint32_t>(0) != kRawMagic)
    return Error(ErrorCode::bad_magic, "not raw bitcode (no 42 43 c0 de magic)", module.origin(0));
  std::vector<std::pair<uint64_t, uint64_t>> names;  // (offset, size) in the string table
  ByteView strtab;
  uint64_t off = 4;
  while (off + 4 <= module.size() && module.read<uint32_t>(off) != 0) {
    BitReader r(module, off);
    uint64_t abbrev, id, width, words;
    if (!r.read(2, abbrev) || abbrev != kEnterSubblock || !r.read_vbr(8, id) || !r.read_vbr(4, width))
      return truncated_at(module, off, "top-level block");
    r.align32();
    if (!r.read(32, words) || !module.contains(r.byte(), words * 4))
      return truncated_at(module, off, "top-level block");
    uint64_t next = r.byte() + words * 4;
    if (id == kModuleBlock || id == kStrtabBlock) {
      if (width < 2 || width > 32) return truncated_at(module, off, "top-level block");
      Status read = read_block(r, module, unsigned(width), off, [&](const Record& rec) {
        if (id == kModuleBlock && rec.code == kFunctionRecord && rec.ops.size() >= 2)
          names.emplace_back(rec.ops[0], rec.ops[1]);
        else if (id == kStrtabBlock && rec.code == kStrtabBlob) strtab = rec.blob;
      });
      if (!read) return read.error();
    }
    off = next;
  }
  std::vector<std::string> out;
  for (auto [at, size] : names) {
    if (!strtab.contains(at, size))
      return Error(ErrorCode::out_of_bounds,
                   "bitcode function name at string table offset " + hex(at) + " (" + std::to_string(size) +
                       " bytes) lies past the string table's " + std::to_string(strtab.size()) + " bytes",
                   module.origin(0));
    out.emplace_back(reinterpret_cast<const char*>(strtab.data()) + at, size);
  }
  return out;
}

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
