// The JIT key of a launch (docs/hashing.md, "JIT key"): what one compiled
// object is valid for. Built from what the hook layer gives a client at a launch
// (its argument pointers and parameter sizes) and the kernel's runtime-constant
// arguments (kir_jit_arg), with arrays and objects passed by pointer read
// through the caller's read_memory. The C entry point is kir_jit_key (kir/kir.h).
//
// Compared with Proteus's cache key (JitEngineDevice<ImplT>::compileAndRun in
// src/include/proteus/impl/JitEngineDevice.h, Proteus e587017) the key covers
// the same inputs — the static hash, the runtime constants' values with arrays
// and objects dereferenced (dispatchGetRuntimeConstantValue), the lambdas'
// jit_variables (getLambdaJitValues, LambdaRegistry), the block, the grid when
// dims are specialized, the code-generation and specialization configuration —
// plus the device architecture and the dynamic shared memory, as typed,
// length-prefixed records hashed once with XXH3-128 instead of a 64-bit fold.
#pragma once

#include "kir/hash/hash.hpp"
#include "kir/kir.h"
#include "kir/support/error.hpp"

namespace kir {

/// Adds the JIT key's records after HEADER, STATIC and ARCH (which `h` holds)
/// for `in`: ARG (runtime constants by increasing position), CAPTURE,
/// SPECIALIZE, GRID, BLOCK, BOUNDS, SHARED, CONFIG. Allocation-free unless it
/// fails (the error's message).
Status add_jit_key_records(DynamicHash& h, const kir_jit_key_input& in);

/// The JIT key of `in` (starting from `in.prefix` when the caller's struct has
/// one and it is set).
Expected<Hash128> jit_key(const kir_jit_key_input& in);

/// The byte size of a kir_arg_type's value; 0 for KIR_ARG_BYTES (any size) and
/// for numbers that are no type.
size_t arg_type_size(uint8_t type);

}  // namespace kir
