// LLVM bitcode as kir finds it: raw ("BC" C0 DE) or in the wrapper header
// (DE C0 17 0B, then u32 version, u32 offset, u32 size, u32 cputype), alone or
// several modules back to back (`ld -r` concatenates `.llvmbc` sections).
//
// A module is a bitstream: after the 4-byte magic, top-level blocks, each
// "ENTER_SUBBLOCK" (abbrev id 1 in 2 bits), a vbr8 block id, a vbr4 abbrev
// width, alignment to 32 bits and a u32 length in 32-bit words. kir walks
// these headers to find where each module ends, and decodes only the
// module-level records that name its functions (bitcode_function_names);
// llvmlite reads the rest on the Python side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

/// True when `bytes` starts with raw bitcode or the bitcode wrapper magic.
bool is_bitcode(ByteView bytes);

/// The modules in `bytes`: each one's bytes, unwrapped (the wrapper header
/// removed). Trailing zero padding is allowed; anything else is an error.
Expected<std::vector<ByteView>> split_bitcode(ByteView bytes);

/// The size of the raw module whose magic starts `bytes`: up to the end of its
/// last top-level block (the next magic, zero padding or the end of `bytes`).
/// `blocks`, when given, receives the top-level block ids.
Expected<uint64_t> bitcode_module_size(ByteView bytes, std::vector<uint32_t>* blocks = nullptr);

/// Top-level block ids of one module, in order (13 identification, 8 module,
/// 23 string table, 25 symbol table ...).
Expected<std::vector<uint32_t>> bitcode_blocks(ByteView module);

/// The names of the functions (definitions and declarations) one raw module
/// declares, in its order: the MODULE_BLOCK's FUNCTION records (code 8, whose
/// first two operands are the name's offset and size in the string table) and
/// the STRTAB block's blob (bitcode of LLVM 5 and later). Only module-level
/// records are decoded (abbreviations included); nested blocks are skipped.
Expected<std::vector<std::string>> bitcode_function_names(ByteView module);

}  // namespace kir
