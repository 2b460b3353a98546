// kir._core's cache: kir::cache::Cache (kir/cache.hpp) and the entry codec,
// for kir.cache (python/kir/cache.py), which wraps them in its Cache and Entry.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "kir/cache.hpp"
#include "recording.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kir_bindings {

namespace {

kir::Hash128 key_of(const std::string& text) {
  std::optional<kir::Hash128> h = kir::Hash128::from_hex(text);
  if (!h) throw nb::value_error(("not a cache key (32 lowercase hex digits): '" + text + "'").c_str());
  return *h;
}

nb::dict entry_dict(const kir::cache::Held& h) {
  nb::dict d;
  d["key"] = h.key.hex();
  d["code"] = nb::bytes(static_cast<const char*>(h.entry.code), h.entry.code_size);
  d["kind"] = std::string(h.entry.code_kind);
  d["arch"] = std::string(h.entry.arch);
  nb::list meta;
  for (size_t i = 0; i < h.entry.meta_count; ++i)
    meta.append(nb::make_tuple(std::string(h.meta[i].key), std::string(h.meta[i].value)));
  d["meta"] = meta;
  d["size"] = h.file_size;
  d["mtime_ns"] = h.mtime_ns;
  return d;
}

using Meta = std::vector<std::pair<std::string, std::string>>;

kir::cache::EntryView view_of(const std::string& key, const nb::bytes& code, const std::string& kind,
                              const std::string& arch, const Meta& meta) {
  kir::cache::EntryView v;
  v.key = key_of(key);
  v.kind = kind;
  v.arch = arch;
  v.code = kir::ByteView(reinterpret_cast<const uint8_t*>(code.c_str()), code.size());
  for (const auto& [k, value] : meta) v.meta.emplace_back(k, value);
  return v;
}

/// The Python object: a handle on an open kir::cache::Cache (neither copyable nor movable).
struct PyCache {
  std::unique_ptr<kir::cache::Cache> cache;
  kir::cache::Cache* operator->() const { return cache.get(); }
};

}  // namespace

void bind_cache(nb::module_& m) {
  using Cache = PyCache;
  nb::class_<Cache>(m, "Cache", "The kernel-object cache under one directory (docs/cache.md).")
      .def(
          "__init__",
          [](Cache* self, const std::string& directory, uint64_t max_bytes, bool create, const std::string& group) {
            kir::cache::Options o;
            o.max_bytes = max_bytes;
            o.create = create;
            o.group = group;
            kir::Expected<std::unique_ptr<kir::cache::Cache>> c = kir::cache::Cache::open(directory, o);
            if (!c) raise_kir_error(c.error());
            new (self) PyCache{std::move(*c)};
          },
          "directory"_a, "max_bytes"_a = 0, "create"_a = true, "group"_a = "")
      .def_prop_ro("directory", [](const Cache& c) { return c->directory(); })
      .def(
          "lookup",
          [](Cache& c, const std::string& key) -> nb::object {
            kir::Expected<const kir::cache::Held*> h = c->lookup(key_of(key));
            if (!h) raise_kir_error(h.error());
            if (!*h) return nb::none();
            return entry_dict(**h);
          },
          "key"_a,
          "The entry of `key` (a dict), or None (a damaged entry is a miss: see last_problem); KirError for a "
          "refused directory or entry (docs/cache.md, \"Who may write the cache\").")
      .def(
          "store",
          [](Cache& c, const std::string& key, nb::bytes code, const std::string& kind, const std::string& arch,
             const Meta& meta) {
            kir::cache::EntryView v = view_of(key, code, kind, arch, meta);
            kir::Status s = c->store(v.key, v);
            if (!s) raise_kir_error(s.error());
          },
          "key"_a, "code"_a, "kind"_a, "arch"_a, "meta"_a)
      .def(
          "remove",
          [](Cache& c, const std::string& key) {
            kir::Expected<bool> r = c->remove(key_of(key));
            if (!r) raise_kir_error(r.error());
            return *r;
          },
          "key"_a)
      .def(
          "evict",
          [](Cache& c, uint64_t max_bytes) {
            kir::Expected<uint64_t> r = c->evict(max_bytes);
            if (!r) raise_kir_error(r.error());
            return *r;
          },
          "max_bytes"_a, "Remove least-recently-used entries until at most max_bytes remain; the count removed.")
      .def(
          "list",
          [](const Cache& c, bool problems_too) {
            kir::Expected<std::vector<kir::cache::Listing>> r = c->list(problems_too);
            if (!r) raise_kir_error(r.error());
            nb::list out;
            for (const kir::cache::Listing& l : *r) {
              nb::dict d;
              d["path"] = l.path;
              d["key"] = l.has_key ? l.key.hex() : std::string();
              d["size"] = l.size;
              d["mtime_ns"] = l.mtime_ns;
              d["entry"] = l.entry ? nb::object(entry_dict(*l.entry)) : nb::none();
              d["problem"] = l.problem;
              d["offset"] = l.problem_offset == UINT64_MAX ? nb::none() : nb::object(nb::int_(l.problem_offset));
              d["refused"] = l.refused;
              out.append(d);
            }
            return out;
          },
          "problems_too"_a = false,
          "Every entry file (dicts: path, key, size, mtime_ns, entry or None, problem, offset, refused); "
          "with problems_too also stray files (stale temporaries, misplaced names) and refused directories.")
      .def("stats",
           [](const Cache& c) {
             kir::cache::Stats s = c->stats();
             nb::dict d;
             d["hits"] = s.hits;
             d["memory_hits"] = s.memory_hits;
             d["misses"] = s.misses;
             d["errors"] = s.errors;
             d["evictions"] = s.evictions;
             d["stores"] = s.stores;
             return d;
           })
      .def_prop_ro("last_problem", [](const Cache& c) { return c->last_problem(); });

  m.def(
      "cache_encode_entry",
      [](const std::string& key, nb::bytes code, const std::string& kind, const std::string& arch, const Meta& meta) {
        kir::Expected<std::vector<uint8_t>> b = kir::cache::encode_entry(view_of(key, code, kind, arch, meta));
        if (!b) raise_kir_error(b.error());
        return nb::bytes(reinterpret_cast<const char*>(b->data()), b->size());
      },
      "key"_a, "code"_a, "kind"_a, "arch"_a, "meta"_a, "The bytes of a cache entry file (docs/cache.md).");
  m.def(
      "cache_parse_entry",
      [](nb::bytes data) {
        kir::Expected<kir::cache::EntryView> e =
            kir::cache::parse_entry(kir::ByteView(reinterpret_cast<const uint8_t*>(data.c_str()), data.size()));
        if (!e) raise_kir_error(e.error());
        nb::dict d;
        d["key"] = e->key.hex();
        d["kind"] = std::string(e->kind);
        d["arch"] = std::string(e->arch);
        nb::list meta;
        for (const auto& [k, v] : e->meta) meta.append(nb::make_tuple(std::string(k), std::string(v)));
        d["meta"] = meta;
        d["code"] = nb::bytes(reinterpret_cast<const char*>(e->code.data()), e->code.size());
        return d;
      },
      "data"_a, "Parse and check a cache entry file's bytes (a KirError subclass: what, with its .offset).");
  m.attr("CACHE_FORMAT_VERSION") = kir::cache::kFormatVersion;
}

}  // namespace kir_bindings
