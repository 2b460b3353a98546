// A record's metadata (the msgpack map of a .kirrec body, docs/record-format.md),
// described ONCE as a field table: each map's keys, in the order the writer writes
// them, with their type, bounds, nesting and the format versions that carry them.
// The writer (record_builder.cpp) writes through MapWriter, which takes its keys
// from these fields, checks them against their table and counts the entries it
// wrote; the bindings export the tables (kir._core.record_format()["metadata"]) to
// the generic Python reader (kir.record), the generated JSON schemas
// (docs/schemas/record-v<N>.schema.json) and the key tables of
// docs/record-format.md (kir.record_schema), which keep no copy of their own.
//
// Versions: a field is written by every version from `since` (up to `until`,
// 0: still written). Whenever a field is added, removed or changes its type or
// meaning, format::kVersion is bumped: a new field gets since = the new version;
// a removed one until = the last version that had it. A reader reads a record by
// its version, never by guessing from the keys present. The only exception is
// version 1, where fields were added before this rule: `appeared` (< since) says
// in which versions a field MAY be present (absent, it reads as empty).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kir/hash/hash.hpp"
#include "kir/record/format.hpp"
#include "kir/support/error.hpp"
#include "kir/support/msgpack.hpp"

namespace kir::record::metadata {

/// How a value is stored (the msgpack types of docs/record-format.md).
enum class Type : uint8_t {
  str,      // a string
  choice,   // a string, one of `choices`
  hash,     // a kir hash or chunk name: 32 lowercase hex digits
  sint,     // a signed integer
  uint,     // an unsigned integer from `low` to `high`
  number,   // a float (a reader also takes an integer)
  boolean,  // true or false
  dims,     // [x, y, z], each from 1 to 2^32-1
  bins,     // a list of bin
  chunks,   // a list of chunk names (hash)
  map,      // a map of `table`'s fields
  maps,     // a list of maps of `table`'s fields
};

constexpr const char* type_name(Type t) {
  constexpr const char* names[] = {"str",     "choice", "hash", "sint",   "uint", "number",
                                   "boolean", "dims",   "bins", "chunks", "map",  "maps"};
  return names[static_cast<uint8_t>(t)];
}

struct Table;

struct Field {
  const char* key;
  Type type;
  const char* doc;                              // one line: what it holds (the doc's and the schema's description)
  const Table* table = nullptr;                 // map, maps: the fields of the nested maps
  uint64_t low = 0, high = ~uint64_t(0);        // uint
  const char* const* choices = nullptr;         // choice: nullptr-terminated
  bool nullable = false;                        // nil is a value (no image, not snapshotted, ...)
  uint32_t since = 1, until = 0, appeared = 0;  // versions (above); appeared 0: = since

  constexpr Field range(uint64_t lo, uint64_t hi) const {
    Field f = *this;
    f.low = lo, f.high = hi;
    return f;
  }
  constexpr Field or_nil() const {
    Field f = *this;
    f.nullable = true;
    return f;
  }
  constexpr Field in(uint32_t first, uint32_t last = 0) const {
    Field f = *this;
    f.since = first, f.until = last;
    return f;
  }
  /// Added within version 1 (before the rule): may be absent from version-1 records.
  constexpr Field optional_in_v1() const {
    Field f = *this;
    f.appeared = 1, f.since = 2;
    return f;
  }
  constexpr uint32_t first() const { return appeared ? appeared : since; }
  /// Whether records of `version` carry the field (`required`: always).
  constexpr bool in_version(uint32_t version) const { return first() <= version && (!until || version <= until); }
  constexpr bool required_in(uint32_t version) const { return in_version(version) && since <= version; }
};

struct Table {
  const char* name;  // the reader's name for such a map ("kernel", "code", ...)
  const char* doc;
  const Field* const* fields;
  uint32_t count;
  constexpr const Field& operator[](uint32_t i) const { return *fields[i]; }
};

constexpr Field str(const char* key, const char* doc) { return {key, Type::str, doc}; }
constexpr Field hash(const char* key, const char* doc) { return {key, Type::hash, doc}; }
constexpr Field sint(const char* key, const char* doc) { return {key, Type::sint, doc}; }
constexpr Field uint(const char* key, const char* doc, uint64_t high = ~uint64_t(0)) {
  return Field{key, Type::uint, doc}.range(0, high);
}
constexpr Field number(const char* key, const char* doc) { return {key, Type::number, doc}; }
constexpr Field boolean(const char* key, const char* doc) { return {key, Type::boolean, doc}; }
constexpr Field dims(const char* key, const char* doc) { return {key, Type::dims, doc}; }
constexpr Field bins(const char* key, const char* doc) { return {key, Type::bins, doc}; }
constexpr Field chunks(const char* key, const char* doc) { return {key, Type::chunks, doc}; }
constexpr Field choice(const char* key, const char* const* choices, const char* doc) {
  Field f{key, Type::choice, doc};
  f.choices = choices;
  return f;
}
constexpr Field map(const char* key, const Table& table, const char* doc) {
  Field f{key, Type::map, doc};
  f.table = &table;
  return f;
}
constexpr Field maps(const char* key, const Table& table, const char* doc) {
  Field f{key, Type::maps, doc};
  f.table = &table;
  return f;
}

inline constexpr uint64_t kU32 = 0xffffffffu;
/// The largest parameter buffer a reader accepts (CUDA's is at most 32764 bytes).
inline constexpr uint64_t kMaxParamBytes = 65536;

#define KIR_RECORD_TABLE(var, name, doc, ...)                   \
  inline constexpr const Field* var##_fields[] = {__VA_ARGS__}; \
  inline constexpr Table var { name, doc, var##_fields, uint32_t(sizeof(var##_fields) / sizeof(const Field*)) }

namespace process {
inline constexpr Field pid = sint("pid", "the recorded process's id");
inline constexpr Field rank = sint("rank", "its MPI rank, -1 without MPI");
KIR_RECORD_TABLE(table, "process", "the recorded process", &pid, &rank);
}  // namespace process

namespace device {
inline constexpr Field name = str("name", "the device's name");
inline constexpr Field arch = str("arch", "its architecture, as `sm_90`");
inline constexpr Field ordinal = sint("ordinal", "its ordinal in the process");
KIR_RECORD_TABLE(table, "device", "the device the launch ran on", &name, &arch, &ordinal);
}  // namespace device

namespace code {
inline constexpr Field kind = str("kind", "`cubin` or `ptx`");
inline constexpr Field arch = str("arch", "its architecture, as `sm_90`");
inline constexpr Field chunk = hash("chunk", "the chunk holding it (one chunk)");
inline constexpr Field size = uint("size", "its size in bytes", format::kMaxChunkBytes);
KIR_RECORD_TABLE(table, "code", "a device image stored as one chunk", &kind, &arch, &chunk, &size);
}  // namespace code

namespace ir {
inline constexpr Field chunk = hash("chunk", "the chunk holding the module");
inline constexpr Field size = uint("size", "its size in bytes", format::kMaxChunkBytes);
KIR_RECORD_TABLE(table, "ir", "an LLVM bitcode module stored as one chunk", &chunk, &size);
}  // namespace ir

namespace param {
inline constexpr Field offset = uint("offset", "its offset in the parameter buffer", kMaxParamBytes);
inline constexpr Field size = uint("size", "its size in bytes", kMaxParamBytes);
KIR_RECORD_TABLE(table, "param", "a kernel parameter, as the image lays it out", &offset, &size);
}  // namespace param

namespace jit_arg {
inline constexpr const char* kKinds[] = {"scalar", "array", "object", nullptr};  // kir_jit_arg.kind
inline constexpr Field position = uint("position", "its parameter's 1-based position").range(1, kU32);
inline constexpr Field kind = choice("kind", kKinds, "`scalar`, `array` or `object`");
inline constexpr Field type =
    uint("type", "the kir_arg_type: the scalar's, an array's elements' (14, bytes, for objects)", 255);
inline constexpr Field by_value =
    uint("by_value", "1: an object passed by value, an array of the argument's own bytes", 1);
inline constexpr Field count = uint("count", "a constant-size array's elements; an object's bytes", kU32);
inline constexpr Field count_type =
    uint("count_type", "a run-time-size array: the kir_arg_type of the argument holding its count", 255);
inline constexpr Field count_position =
    uint("count_position", "its 1-based position; 0 when `count` is constant", kU32);
KIR_RECORD_TABLE(table, "jit_arg", "a runtime-constant argument (kir_jit_arg, kir/kir.h)", &position, &kind, &type,
                 &by_value, &count, &count_type, &count_position);
}  // namespace jit_arg

namespace kernel {
inline constexpr Field name = str("name", "the mangled name");
inline constexpr Field demangled = str("demangled", "the demangled name");
inline constexpr Field static_hash = hash("static_hash", "the static hash (docs/hashing.md)");
inline constexpr Field params = maps("params", param::table, "the image's parameter layout");
inline constexpr Field image =
    map("image", code::table, "the image the launch ran; nil (flag `no-layout`) when the hook held none").or_nil();
inline constexpr Field ptx = map("ptx", code::table, "the same fatbin's PTX for the device, or nil").or_nil();
inline constexpr Field ir = map("ir", ir::table, "the LLVM bitcode embedded for the kernel, or nil").or_nil();
inline constexpr Field ptx_units =
    maps("ptx_units", code::table,
         "relocatable device code: the PTX of every unit the image was device-linked from, in link order; else empty")
        .optional_in_v1();
inline constexpr Field jit_args =
    maps("jit_args", jit_arg::table,
         "the kernel's runtime-constant arguments (kir/hooks.h API 4), by position; else empty")
        .optional_in_v1();
KIR_RECORD_TABLE(table, "kernel", "the launched kernel", &name, &demangled, &static_hash, &params, &image, &ptx, &ir,
                 &ptx_units, &jit_args);
}  // namespace kernel

namespace launch {
inline constexpr Field api = str("api", "`cudaLaunchKernel`, `cuLaunchKernel`, ...");
inline constexpr Field launch_identity =
    hash("launch_identity", "the launch identity the hook computed (docs/hashing.md); the recorder deduplicates on it")
        .optional_in_v1();
inline constexpr Field dynamic_hash =
    hash("dynamic_hash", "version 1 only: format 1's dynamic hash (docs/hashing.md: no shared memory)").in(1, 1);
inline constexpr Field grid = dims("grid", "the grid, `[x, y, z]`");
inline constexpr Field block = dims("block", "the block, `[x, y, z]`");
inline constexpr Field shared_bytes = uint("shared_bytes", "dynamic shared memory, bytes", kU32);
inline constexpr Field stream = uint("stream", "the app's stream handle, for information");
inline constexpr Field args = bins("args", "one bin per parameter: the bytes the app passed");
inline constexpr Field ordinal =
    uint("ordinal", "this kernel's launch count in the process, 0-based, before any filter");
KIR_RECORD_TABLE(table, "launch", "the launch", &api, &launch_identity, &dynamic_hash, &grid, &block, &shared_bytes,
                 &stream, &args, &ordinal);
}  // namespace launch

namespace va_range {
inline constexpr Field base = uint("base", "its first address");
inline constexpr Field size = uint("size", "its size in bytes");
KIR_RECORD_TABLE(table, "va_range", "the address range the recording served device allocations from", &base, &size);
}  // namespace va_range

namespace tolerance {
inline constexpr const char* kDtypes[] = {"float16", "bfloat16", "float32", "float64", nullptr};  // KIR_DTYPE_* - 1
inline constexpr const char* kKinds[] = {"abs", "rel", "ulp", nullptr};                           // KIR_TOLERANCE_*
inline constexpr const char* kNorms[] = {"linf", "l1", "l2", nullptr};                            // KIR_NORM_*
// A table of version 3 (allocation.tolerance): its fields too.
inline constexpr Field dtype = choice("dtype", kDtypes, "the buffer's elements").in(3);
inline constexpr Field kind =
    choice("kind", kKinds,
           "`abs`: norm(difference) <= threshold; `rel`: <= threshold * norm(recorded); `ulp`: "
           "per element, at most threshold units in the last place")
        .in(3);
inline constexpr Field threshold = number("threshold", "the bound (ulp: a whole number)").in(3);
inline constexpr Field norm = choice("norm", kNorms, "the norm of abs and rel").in(3);
inline constexpr Field tag = str("tag", "the app's name for the buffer, or empty").in(3);
KIR_RECORD_TABLE(table, "tolerance", "how a replay's contents may differ (kir_record_annotate, kir/record.h)", &dtype,
                 &kind, &threshold, &norm, &tag);
}  // namespace tolerance

namespace region {
inline constexpr Field name = str("name", "the variable's name");
inline constexpr Field address = uint("address", "its address");
inline constexpr Field size = uint("size", "its size in bytes");
inline constexpr Field kind = str("kind", "`device`, `managed`, `host-pinned` (kir/model.hpp AllocationKind)");
inline constexpr Field in_va_range = boolean("in_va_range", "whether it lies in `va_range`");
inline constexpr Field prologue = chunks("prologue",
                                         "the chunks holding its bytes before the kernel, in order (each `chunk_size` "
                                         "bytes but the last); nil: not snapshotted")
                                      .or_nil();
inline constexpr Field epilogue = chunks("epilogue", "the same after the kernel; nil: not snapshotted").or_nil();
inline constexpr Field tolerance =
    map("tolerance", tolerance::table,
        "the app's annotation (kir_record_annotate): how a replay may differ; nil: bitwise, or as the replay says")
        .or_nil()
        .in(3);
KIR_RECORD_TABLE(allocation, "allocation", "an allocation and its contents", &address, &size, &kind, &in_va_range,
                 &prologue, &epilogue, &tolerance);
KIR_RECORD_TABLE(global, "global", "a module global and its contents", &name, &address, &size, &prologue, &epilogue);
}  // namespace region

namespace flag {
inline constexpr Field flag = str("flag", "why the launch may not replay faithfully (the flags below)");
inline constexpr Field detail = str("detail", "what the recorder saw");
KIR_RECORD_TABLE(table, "flag", "a reason the launch may not replay faithfully", &flag, &detail);
}  // namespace flag

namespace stats {
inline constexpr Field prologue_bytes = uint("prologue_bytes", "bytes snapshotted before the kernel");
inline constexpr Field prologue_seconds = number("prologue_seconds", "how long the app waited for that snapshot");
inline constexpr Field epilogue_bytes = uint("epilogue_bytes", "bytes snapshotted after the kernel");
inline constexpr Field epilogue_seconds = number("epilogue_seconds", "how long the app waited for that snapshot");
inline constexpr Field stored_bytes = uint("stored_bytes", "bytes of chunk files this record added");
inline constexpr Field store_seconds =
    number("store_seconds",
           "storing snapshots first copied to device scratch memory, after the app moved on (0 when none was)")
        .optional_in_v1();
inline constexpr Field store_hash_seconds =
    number("store_hash_seconds", "the writer's threads hashing chunks (summed)").optional_in_v1();
inline constexpr Field store_compress_seconds =
    number("store_compress_seconds", "compressing them, the probe included (summed)").optional_in_v1();
inline constexpr Field store_write_seconds =
    number("store_write_seconds", "writing chunk files (summed)").optional_in_v1();
inline constexpr Field copy_wait_seconds =
    number("copy_wait_seconds", "waiting for a device-to-host copy the store had caught up with").optional_in_v1();
inline constexpr Field sync_seconds =
    number("sync_seconds", "making the chunks durable before the record was written").optional_in_v1();
KIR_RECORD_TABLE(table, "stats", "what the recorder measured", &prologue_bytes, &prologue_seconds, &epilogue_bytes,
                 &epilogue_seconds, &stored_bytes, &store_seconds, &store_hash_seconds, &store_compress_seconds,
                 &store_write_seconds, &copy_wait_seconds, &sync_seconds);
}  // namespace stats

namespace record {
inline constexpr const char* kFormats[] = {format::kMetadataFormat, nullptr};
inline constexpr Field format = choice("format", kFormats, "what the map is: a kir record's metadata");
inline constexpr Field version = uint("version", "the format version, as in the header").range(1, kU32);
inline constexpr Field kir_version = str("kir_version", "the writer's kir version");
inline constexpr Field created = number("created", "Unix time, seconds");
inline constexpr Field process = map("process", process::table, "the recorded process");
inline constexpr Field device = map("device", device::table, "the device");
inline constexpr Field kernel = map("kernel", kernel::table, "the kernel");
inline constexpr Field launch = map("launch", launch::table, "the launch");
inline constexpr Field chunk_size =
    uint("chunk_size", "the size memory was cut into (the last chunk of a region may be shorter)")
        .range(1, format::kMaxChunkBytes);
inline constexpr Field va_range =
    map("va_range", va_range::table, "the range the recording served device allocations from, or nil (fallback)")
        .or_nil();
inline constexpr Field allocations = maps("allocations", region::allocation, "the allocations");
inline constexpr Field globals = maps("globals", region::global, "the module globals");
inline constexpr Field flags = maps("flags", flag::table, "why this launch may not replay faithfully; empty when none");
inline constexpr Field stats = map("stats", stats::table, "what the recorder measured");
KIR_RECORD_TABLE(table, "record", "a record's metadata", &format, &version, &kir_version, &created, &process, &device,
                 &kernel, &launch, &chunk_size, &va_range, &allocations, &globals, &flags, &stats);
}  // namespace record

#undef KIR_RECORD_TABLE

/// Every table, the record's first (each once).
inline constexpr const Table* kTables[] = {&record::table, &process::table,  &device::table,      &kernel::table,
                                           &code::table,   &ir::table,       &param::table,       &jit_arg::table,
                                           &launch::table, &va_range::table, &region::allocation, &region::global,
                                           &flag::table,   &stats::table,    &tolerance::table};

namespace detail {
constexpr bool same(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

/// By name: comparing addresses is not a constant expression under the sanitizers.
constexpr bool listed(const Table& table) {
  for (const Table* t : kTables)
    if (same(t->name, table.name)) return true;
  return false;
}

/// The versioning rule, checked at compile time: every field's versions are known
/// ones, and only fields added within version 1 were optional anywhere. Every map
/// field names a table of kTables (what the bindings export).
constexpr bool versions_follow_the_rule() {
  for (const Table* t : kTables)
    for (uint32_t i = 0; i < t->count; ++i) {
      const Field& f = (*t)[i];
      if (f.since < 1 || f.since > format::kVersion || (f.until && (f.until < f.since || f.until >= format::kVersion)))
        return false;
      if (f.appeared && (f.appeared != 1 || f.since != 2)) return false;
      if ((f.type == Type::map || f.type == Type::maps) && !listed(*f.table)) return false;
    }
  return true;
}
}  // namespace detail
static_assert(detail::versions_follow_the_rule(), "record metadata fields must follow the versioning rule");

/// Writes one metadata map of `table`'s fields: the key of each from its field, the
/// value through a method of the field's type, in table order, and the map's entry
/// count derived from the entries written (the header is put in front at end()).
/// A field not of the table, out of order, of another type or out of its bounds,
/// or a required field left out, is an Error at end() (a writer bug, or a caller
/// passing values the format cannot hold): the map is then not to be used.
class MapWriter {
 public:
  /// A map of `table` at the end of `w`'s bytes; a nested one reports its errors to `parent`.
  MapWriter(MsgpackWriter& w, const Table& table, uint32_t version = format::kVersion, MapWriter* parent = nullptr);

  void str(const Field& f, std::string_view value);  // str, choice, hash
  void sint(const Field& f, int64_t value);
  void uint(const Field& f, uint64_t value);
  void number(const Field& f, double value);
  void boolean(const Field& f, bool value);
  void nil(const Field& f);  // a nullable field's nil
  void dims(const Field& f, const std::array<uint32_t, 3>& xyz);
  void bins(const Field& f, const std::vector<std::vector<uint8_t>>& values);
  void chunks(const Field& f, const std::vector<Hash128>& names);
  /// A nested map (`map` field): write its fields through the MapWriter returned, then end() it.
  MapWriter map(const Field& f);
  /// A list of `count` maps (`maps` field): then write each through item(f), ending each.
  void list(const Field& f, uint32_t count);
  MapWriter item(const Field& f);

  /// Puts the map's header, with the count of entries written, in front of them;
  /// the first error of this map or of one nested in it.
  Status end();

 private:
  bool enter(const Field& f, Type type);  // writes f's key when it may come next
  void fail(const Field& f, const std::string& message);

  MsgpackWriter& w_;
  const Table& table_;
  uint32_t version_;
  MapWriter* parent_;
  size_t start_;
  uint32_t next_ = 0, written_ = 0;
  Status status_;
};

}  // namespace kir::record::metadata
