// The JIT key of a launch (kir/hash/jit_key.hpp, docs/hashing.md "JIT key").
#include "kir/hash/jit_key.hpp"

#include <cstddef>
#include <cstring>
#include <new>
#include <string>

namespace kir {

namespace {

bool valid_type(uint8_t type) { return type >= KIR_ARG_I8 && type <= KIR_ARG_BOOL; }

constexpr uint64_t kMaxValueBytes = uint64_t(1) << 30;  // one argument's value: 1 GiB at most

template <class Field>
bool has(const kir_jit_key_input& in, const Field* field) {
  size_t end = size_t(reinterpret_cast<const char*>(field) - reinterpret_cast<const char*>(&in)) + sizeof(Field);
  return in.struct_size >= end;
}

Error arg_error(uint32_t position, const std::string& what) {
  return Error(ErrorCode::invalid_argument, "runtime-constant argument " + std::to_string(position) + ": " + what);
}

/// The element count an array's argument at `position` holds (Proteus:
/// dispatchGetRuntimeConstantValue, ARRAY with OptNumEltsRCInfo).
Expected<uint64_t> read_count(const kir_jit_key_input& in, const kir_jit_arg& a) {
  uint32_t p = a.count_position;
  if (p == 0 || p > in.param_count)
    return arg_error(a.position, "its element count's position " + std::to_string(p) + " is not a parameter (1.." +
                                     std::to_string(in.param_count) + ")");
  if (!in.args[p - 1]) return arg_error(a.position, "its element count, argument " + std::to_string(p) + ", is NULL");
  size_t size = arg_type_size(a.count_type);
  bool is_signed = a.count_type == KIR_ARG_I8 || a.count_type == KIR_ARG_I16 || a.count_type == KIR_ARG_I32 ||
                   a.count_type == KIR_ARG_I64;
  bool is_integer = is_signed || a.count_type == KIR_ARG_U8 || a.count_type == KIR_ARG_U16 ||
                    a.count_type == KIR_ARG_U32 || a.count_type == KIR_ARG_U64;
  if (!is_integer)
    return arg_error(a.position,
                     "its element count's type " + std::to_string(a.count_type) + " is not an integer type");
  if (in.param_sizes && in.param_sizes[p - 1] < size)
    return arg_error(a.position, "its element count, argument " + std::to_string(p) + ", is " +
                                     std::to_string(in.param_sizes[p - 1]) + " bytes, less than its type's " +
                                     std::to_string(size));
  const unsigned char* bytes = static_cast<const unsigned char*>(in.args[p - 1]);
  uint64_t raw = 0;
  std::memcpy(&raw, bytes, size);  // little-endian host
  if (is_signed && size < 8 && (raw >> (8 * size - 1)) & 1) raw |= ~uint64_t(0) << (8 * size);
  if (is_signed && int64_t(raw) < 0)
    return arg_error(a.position, "its element count (argument " + std::to_string(p) +
                                     ") is negative: " + std::to_string(int64_t(raw)));
  return raw;
}

/// Where one runtime-constant argument's value lies: the argument's own bytes
/// (`own`), or `size` bytes at device `address` read through read_memory.
struct Value {
  const void* own = nullptr;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t count = 1;  // kir_jit_value.count
  bool from_memory = false;
};

/// Where the values go (kir_jit_key_input.values, ABI 10), or nowhere.
struct ValueSink {
  kir_jit_value* values = nullptr;
  unsigned char* bytes = nullptr;
  size_t used = 0;  // bytes of `bytes` filled
  size_t index = 0;
};

constexpr uint64_t kValueAlign = 16;
uint64_t aligned(uint64_t n) { return (n + kValueAlign - 1) & ~(kValueAlign - 1); }

/// The argument's own bytes, `size` of them (scalars, by-value arrays and objects).
Expected<Value> own(const kir_jit_key_input& in, const kir_jit_arg& a, uint64_t size, uint64_t count) {
  uint32_t p = a.position;
  if (in.param_sizes && in.param_sizes[p - 1] < size)
    return arg_error(
        p, "needs " + std::to_string(size) + " bytes, the parameter has " + std::to_string(in.param_sizes[p - 1]));
  if (size > kMaxValueBytes) return arg_error(p, std::to_string(size) + " bytes: more than 1 GiB");
  Value v;
  v.own = in.args[p - 1];
  v.size = size;
  v.count = count;
  return v;
}

/// `size` bytes at the pointer the argument holds (arrays and objects by pointer).
Expected<Value> behind_pointer(const kir_jit_key_input& in, const kir_jit_arg& a, uint64_t size, uint64_t count) {
  if (size > kMaxValueBytes) return arg_error(a.position, std::to_string(size) + " bytes to read: more than 1 GiB");
  Value v;
  v.from_memory = true;
  v.size = size;
  v.count = count;
  if (size == 0) return v;
  if (!in.read_memory) return arg_error(a.position, "passed by pointer, and read_memory is NULL");
  std::memcpy(&v.address, in.args[a.position - 1], sizeof(void*));
  if (v.address == 0) return arg_error(a.position, "passed by pointer, and the pointer is NULL");
  return v;
}

/// Where argument `a`'s value lies, checked; reads nothing but the argument bytes.
Expected<Value> locate(const kir_jit_key_input& in, const kir_jit_arg& a) {
  uint32_t p = a.position;
  if (!valid_type(a.type)) return arg_error(p, "type " + std::to_string(a.type) + " is not a kir_arg_type");
  if (!in.args[p - 1]) return arg_error(p, "its value (args[" + std::to_string(p - 1) + "]) is NULL");
  bool pointer_fits = !in.param_sizes || in.param_sizes[p - 1] >= sizeof(void*);
  switch (a.kind) {
    case KIR_JIT_SCALAR: {
      size_t size = arg_type_size(a.type);
      if (size == 0) {  // KIR_ARG_BYTES: the whole parameter
        if (!in.param_sizes) return arg_error(p, "a scalar of type bytes needs param_sizes");
        size = in.param_sizes[p - 1];
      }
      return own(in, a, size, 1);
    }
    case KIR_JIT_ARRAY:
    case KIR_JIT_VECTOR: {  // a vector's elements are its own bytes: encoded as a by-value array's
      size_t element = arg_type_size(a.type);
      if (element == 0) return arg_error(p, "an array's element type must have a fixed size (not bytes)");
      uint64_t count = a.count;
      if (a.count_position) {
        Expected<uint64_t> c = read_count(in, a);
        if (!c) return c.error();
        count = *c;
      }
      if (count > kMaxValueBytes / element)
        return arg_error(p,
                         std::to_string(count) + " elements of " + std::to_string(element) + " bytes: more than 1 GiB");
      if (a.by_value || a.kind == KIR_JIT_VECTOR) return own(in, a, count * element, count);
      if (!pointer_fits) return arg_error(p, "an array passed by pointer, but the parameter is smaller than a pointer");
      return behind_pointer(in, a, count * element, count);
    }
    case KIR_JIT_OBJECT:
      if (a.by_value) return own(in, a, a.count, a.count);
      if (!pointer_fits)
        return arg_error(p, "an object passed by pointer, but the parameter is smaller than a pointer");
      return behind_pointer(in, a, a.count, a.count);
    default: return arg_error(p, "kind " + std::to_string(a.kind) + " is not a kir_jit_arg_kind");
  }
}

Error read_error(const kir_jit_arg& a, uint64_t address, size_t n, int rc) {
  return arg_error(a.position, "read_memory(" + hex(address) + ", " + std::to_string(n) + " bytes) failed (" +
                                   std::to_string(rc) + ")");
}

/// The ARG record of `a` (at `v`), its bytes also copied into `sink` when there is one:
/// device memory is read once, into the sink (or in pieces through a stack buffer).
Status add_value(DynamicHash& h, const kir_jit_key_input& in, const kir_jit_arg& a, const Value& v, ValueSink* sink) {
  const ArgType type = static_cast<ArgType>(a.type);
  const void* bytes = v.own;
  if (sink) {
    unsigned char* to = sink->bytes + sink->used;
    if (v.from_memory && v.size) {
      if (int rc = in.read_memory(in.user, v.address, to, size_t(v.size)); rc != 0)
        return read_error(a, v.address, size_t(v.size), rc);
    } else if (v.size) {
      std::memcpy(to, v.own, size_t(v.size));
    }
    sink->values[sink->index++] = {a.position, a.kind, a.type, uint8_t(v.from_memory), 0, v.count, to, v.size};
    sink->used += size_t(aligned(v.size));
    bytes = to;
  } else if (v.from_memory && v.size) {
    h.arg_header(a.position, type, v.size);
    alignas(16) unsigned char buffer[4096];
    for (uint64_t done = 0; done < v.size;) {
      size_t n = size_t(v.size - done < sizeof buffer ? v.size - done : sizeof buffer);
      if (int rc = in.read_memory(in.user, v.address + done, buffer, n); rc != 0)
        return read_error(a, v.address + done, n, rc);
      h.append(buffer, n);
      done += n;
    }
    return {};
  }
  h.arg(a.position, type, v.size ? bytes : nullptr, size_t(v.size));
  return {};
}

/// Calls `visit(arg)` for the runtime-constant arguments by increasing position,
/// whatever order the client keeps them in (a handful: selecting the next
/// smallest each time needs no storage); stops at the first error.
template <class Visit>
Status each_arg(const kir_jit_key_input& in, Visit&& visit) {
  uint32_t previous = 0;
  for (size_t done = 0; done < in.jit_arg_count; ++done) {
    const kir_jit_arg* next = nullptr;
    for (size_t i = 0; i < in.jit_arg_count; ++i) {
      const kir_jit_arg& a = in.jit_args[i];
      if (a.position <= previous && done) continue;
      if (next && a.position == next->position)
        return arg_error(a.position, "given twice (jit_args[] holds two entries for it)");
      if (!next || a.position < next->position) next = &a;
    }
    if (!next || (done && next->position <= previous))
      return Error(ErrorCode::invalid_argument, "jit_args hold one position twice");
    if (next->position == 0 || next->position > in.param_count)
      return arg_error(next->position, "not a parameter position (1.." + std::to_string(in.param_count) + ")");
    if (Status s = visit(*next); !s) return s;
    previous = next->position;
  }
  return {};
}

/// The ARG records; with `in.values` (ABI 10) the values too, after checking
/// that value_bytes holds them all — before anything is read.
Status add_args(DynamicHash& h, const kir_jit_key_input& in) {
  const bool want_values = has(in, &in.value_bytes_size) && in.values;
  if (!want_values) {
    return each_arg(in, [&](const kir_jit_arg& a) -> Status {
      Expected<Value> v = locate(in, a);
      if (!v) return v.error();
      return add_value(h, in, a, *v, nullptr);
    });
  }
  uint64_t needed = 0;
  Status sized = each_arg(in, [&](const kir_jit_arg& a) -> Status {
    Expected<Value> v = locate(in, a);
    if (!v) return v.error();
    needed += aligned(v->size);
    return {};
  });
  if (!sized) return sized;
  if (in.value_bytes_size) *in.value_bytes_size = size_t(needed);
  if (needed > in.value_bytes_capacity)
    return Error(ErrorCode::too_large, "the values need " + std::to_string(needed) +
                                           " bytes, value_bytes_capacity is " +
                                           std::to_string(in.value_bytes_capacity));
  if (needed && !in.value_bytes) return Error(ErrorCode::invalid_argument, "value_bytes is NULL");
  ValueSink sink;
  sink.values = in.values;
  sink.bytes = static_cast<unsigned char*>(in.value_bytes);
  return each_arg(in, [&](const kir_jit_arg& a) -> Status {
    Expected<Value> v = locate(in, a);
    if (!v) return v.error();
    return add_value(h, in, a, *v, &sink);
  });
}

}  // namespace

Status add_jit_key_records(DynamicHash& h, const kir_jit_key_input& in) {
  if (in.jit_arg_count && !in.jit_args)
    return Error(ErrorCode::invalid_argument, "jit_args is NULL, jit_arg_count " + std::to_string(in.jit_arg_count));
  if (in.jit_arg_count && !in.args)
    return Error(ErrorCode::invalid_argument,
                 "the launch's args are NULL, and the kernel has runtime-constant arguments");
  if (Status s = add_args(h, in); !s) return s;
  if (has(in, &in.capture_count) && in.capture_count) {
    if (!in.captures)
      return Error(ErrorCode::invalid_argument, "captures is NULL, capture_count " + std::to_string(in.capture_count));
    for (size_t i = 0; i < in.capture_count; ++i) {
      const kir_jit_capture& c = in.captures[i];
      auto where = [i] { return "lambda capture #" + std::to_string(i); };  // errors only: no allocation otherwise
      if (!c.lambda) return Error(ErrorCode::invalid_argument, where() + ": lambda is NULL");
      if (!valid_type(c.type))
        return Error(ErrorCode::invalid_argument,
                     where() + ": type " + std::to_string(c.type) + " is not a kir_arg_type");
      if (!c.value && c.size) return Error(ErrorCode::invalid_argument, where() + ": value is NULL");
      h.capture(c.lambda, c.slot, c.offset, static_cast<ArgType>(c.type), c.value, c.size);
    }
  }
  bool bounds = in.max_threads || in.min_blocks;
  h.specialize((in.specialize_grid ? kSpecializeGrid : 0) | (in.specialize_block ? kSpecializeBlock : 0) |
               (bounds ? kSpecializeBounds : 0));
  if (in.specialize_grid) h.grid(in.grid[0], in.grid[1], in.grid[2]);
  if (in.specialize_block) h.block(in.block[0], in.block[1], in.block[2]);
  if (bounds) h.bounds(in.max_threads, in.min_blocks);
  h.shared(in.shared_bytes);
  if (has(in, &in.config_records_size) && in.config_records) {
    if (in.config_count || in.config)
      return Error(ErrorCode::invalid_argument,
                   "config_records and config are both given: one encoding of the CONFIG records");
    h.records(in.config_records, in.config_records_size);  // kir_jit_config_records' output
    return {};
  }
  if (in.config_count && !in.config)
    return Error(ErrorCode::invalid_argument, "config is NULL, config_count " + std::to_string(in.config_count));
  for (size_t i = 0; i < in.config_count; ++i) {
    const kir_config_item& c = in.config[i];
    if (!c.key) return Error(ErrorCode::invalid_argument, "config item #" + std::to_string(i) + ": key is NULL");
    if (!c.value && c.size)
      return Error(ErrorCode::invalid_argument, "config item '" + std::string(c.key) + "': value is NULL");
    h.config(c.key, std::string_view(static_cast<const char*>(c.value), c.size));
  }
  return {};
}

size_t arg_type_size(uint8_t type) {
  switch (type) {
    case KIR_ARG_I8:
    case KIR_ARG_U8:
    case KIR_ARG_BOOL: return 1;
    case KIR_ARG_I16:
    case KIR_ARG_U16:
    case KIR_ARG_F16:
    case KIR_ARG_BF16: return 2;
    case KIR_ARG_I32:
    case KIR_ARG_U32:
    case KIR_ARG_F32: return 4;
    case KIR_ARG_I64:
    case KIR_ARG_U64:
    case KIR_ARG_F64:
    case KIR_ARG_PTR: return 8;
    default: return 0;
  }
}

Expected<Hash128> jit_key(const kir_jit_key_input& in) {
  if (!has(in, &in.user))
    return Error(ErrorCode::invalid_argument,
                 "kir_jit_key_input.struct_size " + std::to_string(in.struct_size) + " is too small (at least " +
                     std::to_string(offsetof(kir_jit_key_input, user) + sizeof(void*)) + ")");
  const kir_dynamic_hash* prefix = has(in, &in.prefix) ? in.prefix : nullptr;
  if (prefix) {
    DynamicHash h = DynamicHash::extend(*std::launder(reinterpret_cast<const DynamicHash*>(prefix->opaque)));
    if (Status s = add_jit_key_records(h, in); !s) return s.error();
    return h.finish();
  }
  DynamicHash h(HashDomain::jit_key, Hash128{in.static_hash.high, in.static_hash.low}, in.arch ? in.arch : "");
  if (Status s = add_jit_key_records(h, in); !s) return s.error();
  return h.finish();
}

}  // namespace kir
