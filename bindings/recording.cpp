// Bindings of kir/record/*: the same RecordBuilder and ChunkStore the in-app
// recorder writes with (tests build records from host bytes through them), the
// reachability walk, zstd decoding, measuring a record's metadata, and the format description (kir/record/format.hpp)
// kir.record reads with.
#include "recording.hpp"

#include <nanobind/stl/array.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <zstd.h>

#include <memory>

#include "kir/record/chunk_store.hpp"
#include "kir/record/format.hpp"
#include "kir/record/metadata.hpp"
#include "kir/record/reachability.hpp"
#include "kir/record/record_builder.hpp"
#include "kir/support/compression.hpp"
#include "kir/support/msgpack.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kir_bindings {

namespace {

kir::ByteView view(const nb::bytes& b) { return kir::ByteView(reinterpret_cast<const uint8_t*>(b.c_str()), b.size()); }

void check(const kir::Status& s) {
  if (!s) raise_kir_error(s.error());
}

/// A RecordBuilder with the ChunkStore it writes into.
struct PyRecordBuilder {
  std::unique_ptr<kir::record::ChunkStore> store;
  std::unique_ptr<kir::record::RecordBuilder> builder;

  PyRecordBuilder(const std::string& directory, uint64_t chunk_size, int zstd_level) {
    auto opened = kir::record::ChunkStore::open(directory, zstd_level);
    if (!opened) raise_kir_error(opened.error());
    store = std::move(*opened);
    builder = std::make_unique<kir::record::RecordBuilder>(*store, chunk_size);
  }
};

std::array<uint32_t, 3> dim(const std::tuple<uint32_t, uint32_t, uint32_t>& t) {
  return {std::get<0>(t), std::get<1>(t), std::get<2>(t)};
}

void bind_builder(nb::module_& m) {
  using B = PyRecordBuilder;
  nb::class_<B>(m, "RecordBuilder",
                "Writes one launch record (docs/record-format.md) into a recording directory: "
                "the C++ writer the in-app recorder uses, fed host bytes.")
      .def(nb::init<const std::string&, uint64_t, int>(), "directory"_a, "chunk_size"_a = 4 << 20, "zstd_level"_a = 1)
      .def(
          "set_process", [](B& b, int64_t pid, int64_t rank) { b.builder->set_process(pid, rank); }, "pid"_a, "rank"_a)
      .def(
          "set_device",
          [](B& b, std::string name, std::string arch, int64_t ordinal) {
            b.builder->set_device(std::move(name), std::move(arch), ordinal);
          },
          "name"_a, "arch"_a, "ordinal"_a)
      .def(
          "set_kernel",
          [](B& b, std::string name, std::string demangled, kir::Hash128 static_hash, std::vector<uint32_t> offsets,
             std::vector<uint32_t> sizes) {
            b.builder->set_kernel(std::move(name), std::move(demangled), static_hash, std::move(offsets),
                                  std::move(sizes));
          },
          "name"_a, "demangled"_a, "static_hash"_a, "offsets"_a, "sizes"_a)
      .def(
          "set_image",
          [](B& b, std::string kind, std::string arch, nb::bytes data) {
            check(b.builder->set_image(std::move(kind), std::move(arch), view(data)));
          },
          "kind"_a, "arch"_a, "data"_a)
      .def(
          "set_ptx",
          [](B& b, std::string arch, nb::bytes data) { check(b.builder->set_ptx(std::move(arch), view(data))); },
          "arch"_a, "data"_a)
      .def(
          "set_ir", [](B& b, nb::bytes data) { check(b.builder->set_ir(view(data))); }, "data"_a)
      .def(
          "add_ptx_unit",
          [](B& b, std::string arch, nb::bytes data) { check(b.builder->add_ptx_unit(std::move(arch), view(data))); },
          "arch"_a, "data"_a)
      .def(
          "set_jit_args",
          [](B& b,
             const std::vector<std::tuple<uint32_t, std::string, uint8_t, bool, uint32_t, uint8_t, uint32_t>>& args) {
            std::vector<kir_jit_arg> out;
            for (const auto& [position, kind, type, by_value, count, count_type, count_position] : args) {
              kir_jit_arg a{};
              a.position = position;
              std::optional<kir::JitArgKind> k = kir::jit_arg_kind_from_name(kind);
              if (!k)
                throw nb::value_error(
                    ("jit argument kind must be scalar, array, object or vector, not " + kind).c_str());
              a.kind = uint8_t(*k);
              a.type = type, a.by_value = by_value, a.count = count, a.count_type = count_type;
              a.count_position = count_position;
              out.push_back(a);
            }
            b.builder->set_jit_args(std::move(out));
          },
          "args"_a, "(position, kind, type, by_value, count, count_type, count_position) per argument")
      .def(
          "set_launch",
          [](B& b, std::string api, kir::Hash128 launch_identity, std::tuple<uint32_t, uint32_t, uint32_t> grid,
             std::tuple<uint32_t, uint32_t, uint32_t> block, uint64_t shared_bytes, uint64_t stream,
             const std::vector<nb::bytes>& args, uint64_t ordinal) {
            std::vector<std::vector<uint8_t>> bytes;
            for (const nb::bytes& a : args) {
              kir::ByteView v = view(a);
              bytes.emplace_back(v.data(), v.data() + v.size());
            }
            b.builder->set_launch(std::move(api), launch_identity, dim(grid), dim(block), shared_bytes, stream,
                                  std::move(bytes), ordinal);
          },
          "api"_a, "launch_identity"_a, "grid"_a, "block"_a, "shared_bytes"_a, "stream"_a, "args"_a, "ordinal"_a)
      .def(
          "set_va_range", [](B& b, uint64_t base, uint64_t size) { b.builder->set_va_range(base, size); }, "base"_a,
          "size"_a)
      .def(
          "add_allocation",
          [](B& b, uint64_t address, uint64_t size, std::string kind, bool in_va_range) {
            return b.builder->add_allocation(address, size, std::move(kind), in_va_range);
          },
          "address"_a, "size"_a, "kind"_a, "in_va_range"_a,
          "Add an allocation; returns its region index (allocations and globals share one index space).")
      .def(
          "add_global",
          [](B& b, std::string name, uint64_t address, uint64_t size) {
            return b.builder->add_global(std::move(name), address, size);
          },
          "name"_a, "address"_a, "size"_a, "Add a module global; returns its region index.")
      .def(
          "snapshot",
          [](B& b, size_t region, bool epilogue, nb::bytes data, uint64_t offset, unsigned threads) {
            kir::ByteView v = view(data);
            kir::Status s;
            {
              nb::gil_scoped_release release;
              s = b.builder->snapshot(region, epilogue, offset, v, threads);
            }
            check(s);
          },
          "region"_a, "epilogue"_a, "data"_a, "offset"_a = 0, "threads"_a = 1,
          "Store a region's contents (before the kernel, or after it with epilogue=True) from byte `offset`.")
      .def(
          "set_tolerance",
          [](B& b, size_t region, std::string dtype, std::string kind, double threshold, std::string norm,
             std::string tag) {
            // What kir_record_annotate accepts (libkir/hook/exports.cpp), by the record's names
            // (kir/record/metadata.hpp, tolerance::kDtypes, kKinds, kNorms).
            namespace t = kir::record::metadata::tolerance;
            auto one_of = [](const char* const* choices, const std::string& value, const char* what) {
              std::string names;
              for (const char* const* c = choices; *c; ++c) {
                if (value == *c) return;
                names += std::string(names.empty() ? "" : ", ") + *c;
              }
              throw nb::value_error(
                  ("tolerance " + std::string(what) + " '" + value + "': expected one of " + names).c_str());
            };
            one_of(t::kDtypes, dtype, "dtype");
            one_of(t::kKinds, kind, "kind");
            one_of(t::kNorms, norm, "norm");
            bool ulp = kind == "ulp";
            if (!(threshold >= 0 && threshold <= 1e300) ||
                (ulp && !(threshold < 9.2e18 && threshold == double(uint64_t(threshold)))))
              throw nb::value_error(("tolerance threshold " + std::to_string(threshold) +
                                     (ulp ? ": expected a whole number of ulps" : ": expected 0 to 1e300"))
                                        .c_str());
            const std::vector<kir::record::Region>& regions = b.builder->regions();
            if (region >= regions.size() || regions[region].global)
              throw nb::index_error(("region " + std::to_string(region) + " is not an allocation").c_str());
            kir::record::Tolerance tolerance;
            tolerance.dtype = std::move(dtype), tolerance.kind = std::move(kind), tolerance.norm = std::move(norm);
            tolerance.tag = std::move(tag), tolerance.threshold = threshold;
            b.builder->set_tolerance(region, std::move(tolerance));
          },
          "region"_a, "dtype"_a, "kind"_a, "threshold"_a, "norm"_a = "linf", "tag"_a = "",
          "The app's annotation of allocation `region` (kir_record_annotate, kir/record.h): how a replay's "
          "contents may differ; dtype float16|bfloat16|float32|float64, kind abs|rel|ulp, norm linf|l1|l2.")
      .def(
          "add_flag",
          [](B& b, std::string flag, std::string detail) { b.builder->add_flag(std::move(flag), std::move(detail)); },
          "flag"_a, "detail"_a)
      .def(
          "metadata",
          [](B& b) {
            kir::Expected<std::vector<uint8_t>> body = b.builder->metadata();
            if (!body) raise_kir_error(body.error());
            return nb::bytes(reinterpret_cast<const char*>(body->data()), body->size());
          },
          "The record's metadata as msgpack.")
      .def(
          "write",
          [](B& b) {
            kir::Expected<std::string> path = b.builder->write();
            if (!path) raise_kir_error(path.error());
            return *path;
          },
          "Write the .kirrec atomically; returns its path.")
      .def_prop_ro(
          "stored_bytes", [](B& b) { return b.store->stored_bytes(); },
          "Bytes this builder's chunk store wrote to disk.")
      .def_prop_ro("stored_chunks", [](B& b) { return b.store->stored_chunks(); });
}

nb::dict header_description(const kir::record::format::Header& h) {
  using kir::record::format::FieldType;
  nb::list fields;
  for (uint32_t i = 0; i < h.count; ++i) {
    const kir::record::format::Field& f = h[i];
    const char* type = f.type == FieldType::bytes ? "bytes" : f.type == FieldType::u32 ? "u32" : "u64";
    fields.append(nb::make_tuple(f.name, f.offset, f.size, type));
  }
  nb::dict d;
  d["magic"] = nb::bytes(h.magic, 8);
  d["size"] = h.size;
  d["fields"] = fields;
  return d;
}

/// kir/record/metadata.hpp's field tables: {"root", "max_param_bytes", "tables": {name: {"doc", "fields"}}},
/// each field a dict (key, type, doc, table, low, high, choices, nullable, since, until, first).
nb::dict metadata_description() {
  namespace m = kir::record::metadata;
  nb::dict tables;
  for (const m::Table* t : m::kTables) {
    nb::list fields;
    for (uint32_t i = 0; i < t->count; ++i) {
      const m::Field& f = (*t)[i];
      nb::dict d;
      d["key"] = f.key;
      d["type"] = m::type_name(f.type);
      d["doc"] = f.doc;
      d["table"] = f.table ? nb::object(nb::str(f.table->name)) : nb::none();
      d["low"] = f.low;
      d["high"] = f.high;
      nb::object choices = nb::none();
      if (f.choices) {
        nb::list names;
        for (const char* const* c = f.choices; *c; ++c) names.append(*c);
        choices = nb::tuple(names);
      }
      d["choices"] = choices;
      d["nullable"] = f.nullable;
      d["since"] = f.since;
      d["until"] = f.until;
      d["first"] = f.first();
      fields.append(d);
    }
    nb::dict table;
    table["doc"] = t->doc;
    table["fields"] = fields;
    tables[t->name] = table;
  }
  nb::dict d;
  d["root"] = m::record::table.name;
  d["max_param_bytes"] = m::kMaxParamBytes;
  d["tables"] = tables;
  return d;
}

/// kir/record/format.hpp as a dict (built once: the description does not change).
nb::dict format_description() {
  namespace format = kir::record::format;
  nb::list versions;
  for (uint32_t v : format::kVersions) versions.append(v);
  nb::dict codecs;
  for (const format::CodecName& c : format::kCodecs) codecs[nb::int_(uint32_t(c.codec))] = c.name;
  nb::dict d;
  d["version"] = format::kVersion;
  d["versions"] = nb::tuple(versions);
  d["metadata_format"] = format::kMetadataFormat;
  d["record_suffix"] = format::kRecordSuffix;
  d["chunk_suffix"] = format::kChunkSuffix;
  d["record_header"] = header_description(format::kRecordHeader);
  d["chunk_header"] = header_description(format::kChunkHeader);
  d["codecs"] = codecs;
  d["max_chunk_bytes"] = format::kMaxChunkBytes;
  d["max_metadata_values"] = format::kMaxMetadataValues;
  d["max_metadata_depth"] = format::kMaxMetadataDepth;
  d["metadata"] = metadata_description();
  return d;
}

}  // namespace

void bind_recording(nb::module_& m) {
  bind_builder(m);
  m.def("record_format", &format_description,
        "The recording format the C++ writer writes (kir/record/format.hpp): version, versions "
        "(every one a reader knows), metadata_format, record_suffix, chunk_suffix, record_header "
        "and chunk_header (magic, size, fields: (name, offset, size, type) with type 'bytes', "
        "'u32' or 'u64', little-endian), codecs ({id: name}), max_chunk_bytes (the largest chunk a reader "
        "accepts and the writer writes), max_metadata_values and max_metadata_depth (a reader's bounds on "
        "the msgpack values in a record's metadata and on their nesting), metadata (the metadata's field "
        "tables, kir/record/metadata.hpp: root, max_param_bytes, tables: {name: {doc, fields}}).");
  m.def(
      "reachable_ranges",
      [](const std::vector<std::pair<uint64_t, uint64_t>>& ranges, const std::vector<uint64_t>& roots,
         const std::vector<nb::bytes>& contents) {
        std::vector<kir::record::MemoryRange> rs;
        for (const auto& [address, size] : ranges) rs.push_back({address, size});
        if (contents.size() != rs.size()) throw nb::value_error("one contents entry per range");
        return kir::record::reachable_ranges(rs, roots, [&](size_t i) { return view(contents[i]); });
      },
      "ranges"_a, "roots"_a, "contents"_a,
      "Indices of the (address, size) ranges reachable from `roots` through 8-byte-aligned words of "
      "reachable ranges' contents (the recorder's --reachable walk).");
  m.def(
      "measure_msgpack",
      [](nb::bytes data, uint64_t max_values, uint64_t max_depth, uint64_t origin) {
        kir::Expected<kir::MsgpackShape> shape = kir::measure_msgpack(
            kir::ByteView(reinterpret_cast<const uint8_t*>(data.c_str()), data.size(), origin), max_values, max_depth);
        if (!shape) raise_kir_error(shape.error());
        return std::make_tuple(shape->values, shape->depth, shape->size);
      },
      "data"_a, "max_values"_a, "max_depth"_a, "origin"_a = 0,
      "(values, depth, size) of the MessagePack value at the start of `data`, walked without building it "
      "(KirError, with the offset plus `origin`, past max_values values, containers nested deeper than "
      "max_depth, or on bytes that are not MessagePack): what decoding it would cost, known first.");
  m.def(
      "zstd_decompress",
      [](nb::bytes data, uint64_t raw_size, uint64_t max_size) {
        // Checked before anything is allocated: a small hostile frame must not
        // make this process reserve gigabytes.
        if (raw_size > max_size)
          raise_kir_error(kir::Error(kir::ErrorCode::too_large, "the claimed size " + kir::hex(raw_size) +
                                                                    " is more than the cap " + kir::hex(max_size)));
        unsigned long long framed = ZSTD_getFrameContentSize(data.c_str(), data.size());
        if (framed == ZSTD_CONTENTSIZE_ERROR)
          raise_kir_error(kir::Error(kir::ErrorCode::malformed, "zstd data of " + kir::hex(data.size()) +
                                                                    " bytes does not start with a valid frame"));
        if (framed != ZSTD_CONTENTSIZE_UNKNOWN && framed != raw_size)
          raise_kir_error(kir::Error(
              kir::ErrorCode::malformed,
              "zstd frame header says " + kir::hex(framed) + " bytes, the claimed size is " + kir::hex(raw_size)));
        kir::Scratch scratch;
        kir::Expected<kir::ByteView> out = kir::decompress_zstd(view(data), raw_size, scratch);
        if (!out) raise_kir_error(out.error());
        return nb::bytes(reinterpret_cast<const char*>(out->data()), out->size());
      },
      "data"_a, "raw_size"_a, "max_size"_a = uint64_t(1) << 30,
      "zstd data that must decode to exactly raw_size bytes (KirError otherwise). raw_size is "
      "refused before anything is allocated when it exceeds max_size (default 1 GiB) or differs "
      "from the frame header's content size.");
}

}  // namespace kir_bindings
