// The core's objects as the records of the `kir inspect` JSON schema
// (docs/json-schema.md), built in one pass so a large library's thousands of
// images cost no Python code per image. No text is rendered here: the table is
// python/kir/report.py's, from these same records.
#include "records.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <charconv>

#include <array>
#include <optional>
#include <unordered_map>

namespace kir_bindings {

namespace {

/// An interned Python string for a dict key, created once per literal (string
/// literals have stable addresses). Called with the GIL held.
nb::handle key(const char* literal) {
  static std::unordered_map<const char*, PyObject*> cache;
  auto [it, added] = cache.try_emplace(literal, nullptr);
  if (added) it->second = PyUnicode_InternFromString(literal);
  return it->second;
}

template <class T>
nb::object optional(const std::optional<T>& v) {
  return v ? nb::cast(*v) : nb::none();
}

nb::object dims(const std::optional<std::array<uint32_t, 3>>& v) {
  if (!v) return nb::none();
  nb::list out;
  for (uint32_t x : *v) out.append(x);
  return out;
}

/// A kernel as the dict `kir inspect --json` prints (docs/json-schema.md).
nb::dict kernel_record(const kir::Kernel& k) {
  nb::list params;
  for (const kir::KernelParam& p : k.params) {
    nb::dict d;
    d[key("ordinal")] = p.ordinal;
    d[key("offset")] = p.offset;
    d[key("size")] = p.size;
    params.append(d);
  }
  nb::dict d;
  d[key("name")] = k.name;
  d[key("demangled")] = k.demangled;
  d[key("params")] = params;
  d[key("param_bytes")] = optional(k.param_bytes);
  d[key("registers")] = optional(k.registers);
  d[key("shared_bytes")] = optional(k.shared_bytes);
  d[key("frame_bytes")] = optional(k.frame_bytes);
  d[key("max_threads")] = dims(k.max_threads);
  d[key("cluster_dims")] = dims(k.cluster_dims);
  return d;
}

}  // namespace

namespace {

/// `text` as json.dumps writes a str (ensure_ascii): false when it holds a byte
/// outside printable ASCII, which json.dumps would escape as \uXXXX.
bool append_json_string(std::string& out, const std::string& text) {
  out += '"';
  for (char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return true;
}

template <class T>
void append_json_optional(std::string& out, const std::optional<T>& v) {
  out += v ? std::to_string(*v) : "null";
}

void append_json_dims(std::string& out, const std::optional<std::array<uint32_t, 3>>& v) {
  if (!v) {
    out += "null";
    return;
  }
  out += '[' + std::to_string((*v)[0]) + ',' + std::to_string((*v)[1]) + ',' + std::to_string((*v)[2]) + ']';
}

}  // namespace

nb::object kernels_json(const kir::DeviceCode& code, nb::dict links) {
  // Byte for byte what json.dumps(kernels, separators=(",", ":")) writes for the
  // kernel_record dicts (plus each kernel's "ir_module" from `links`, name -> module
  // index): the JSON of a large library's kernels without a dict per kernel and
  // parameter (issue 15). None when a name needs json.dumps's own escaping.
  std::string out = "[";
  const bool linked = links.size() != 0;
  for (size_t i = 0; i < code.kernels.size(); ++i) {
    const kir::Kernel& k = code.kernels[i];
    out += i ? ",{\"name\":" : "{\"name\":";
    if (!append_json_string(out, k.name)) return nb::none();
    out += ",\"demangled\":";
    if (!append_json_string(out, k.demangled)) return nb::none();
    out += ",\"params\":[";
    for (size_t j = 0; j < k.params.size(); ++j) {
      const kir::KernelParam& p = k.params[j];
      out += j ? ",{\"ordinal\":" : "{\"ordinal\":";
      out += std::to_string(p.ordinal) + ",\"offset\":" + std::to_string(p.offset) +
             ",\"size\":" + std::to_string(p.size) + '}';
    }
    out += "],\"param_bytes\":";
    append_json_optional(out, k.param_bytes);
    out += ",\"registers\":";
    append_json_optional(out, k.registers);
    out += ",\"shared_bytes\":";
    append_json_optional(out, k.shared_bytes);
    out += ",\"frame_bytes\":";
    append_json_optional(out, k.frame_bytes);
    out += ",\"max_threads\":";
    append_json_dims(out, k.max_threads);
    out += ",\"cluster_dims\":";
    append_json_dims(out, k.cluster_dims);
    out += ",\"ir_module\":";
    nb::object module = linked ? links.get(nb::str(k.name.c_str()), nb::none()) : nb::none();
    if (module.is_none()) out += "null";
    else out += std::to_string(nb::cast<int64_t>(module));
    out += '}';
  }
  out += ']';
  return nb::str(out.data(), out.size());
}

nb::dict code_records(const kir::DeviceCode& code, bool with_kernels) {
  nb::list kernels, functions, globals;
  if (with_kernels)
    for (const kir::Kernel& k : code.kernels) kernels.append(kernel_record(k));
  for (const std::string& f : code.functions) functions.append(f);
  for (const kir::DeviceGlobal& g : code.globals) {
    nb::dict d;
    d[key("name")] = g.name;
    d[key("section")] = g.section;
    d[key("size")] = g.size;
    globals.append(d);
  }
  nb::list ir;
  for (const kir::EmbeddedModule& e : code.ir) {
    nb::dict m;
    m[key("name")] = e.name;
    m[key("kernel")] = e.kernel;
    m[key("md5")] = e.md5;
    m[key("hash")] = e.hash;
    m[key("size")] = e.bitcode.size();
    ir.append(m);
  }
  nb::dict d;
  d[key("kernels")] = kernels;
  d[key("functions")] = functions;
  d[key("globals")] = globals;
  d[key("ir")] = ir;
  if (!code.target.empty()) d[key("target_id")] = code.target;
  return d;
}

namespace {

/// Options as text when they are printable, else "hex:..." (sm_100+ blobs).
std::string options_text(const std::string& raw) {
  std::string text = raw.substr(0, raw.find_last_not_of('\0') + 1);
  bool printable = true;
  for (unsigned char c : text) printable = printable && c >= 32 && c < 127;
  if (printable) {
    size_t b = text.find_first_not_of(' '), e = text.find_last_not_of(' ');
    return b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
  }
  static const char digits[] = "0123456789abcdef";
  std::string out = "hex:";
  for (unsigned char c : raw) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

}  // namespace

/// Every image as the dict `kir inspect --json` prints (docs/json-schema.md),
/// in one call: the fast path of `kir inspect`.
nb::list image_records(const kir::Binary& b) {
  nb::list records;
  std::unordered_map<uint64_t, nb::object> flag_names;  // few distinct values
  uint32_t index = 0;
  for (uint32_t c = 0; c < b.containers().size(); ++c) {
    for (const kir::Image& i : b.containers()[c].images) {
      nb::dict d;
      d[key("index")] = index++;
      d[key("container")] = c;
      d[key("entry")] = i.index;
      d[key("kind")] = kir::name(i.kind);
      d[key("arch")] = i.target;
      d[key("triple")] = i.triple;
      d[key("id")] = i.id;
      d[key("compression")] = kir::name(i.compression);
      d[key("size")] = i.size;
      d[key("stored_size")] = i.stored.size();
      d[key("file_offset")] = optional(i.file_offset);
      nb::object version = nb::none(), flags = nb::list();
      if (const std::optional<kir::FatbinEntry>& e = i.fatbin) {
        auto names = flag_names.find(e->flags);
        if (names == flag_names.end())
          names = flag_names.emplace(e->flags, nb::cast(kir::fatbin_flag_names(e->flags))).first;
        nb::list v;
        v.append(e->major);
        v.append(e->minor);
        version = v;
        flags = names->second;
      }
      d[key("version")] = version;
      d[key("flags")] = flags;
      d[key("obfuscated")] = i.fatbin && i.fatbin->obfuscated();
      d[key("identifier")] = i.fatbin ? i.fatbin->identifier : std::string();
      d[key("options")] = i.fatbin ? options_text(i.fatbin->options) : std::string();
      nb::dict strings;
      for (const auto& [k, v] : i.strings) strings[nb::str(k.c_str())] = v;
      d[key("strings")] = strings;
      records.append(d);
    }
  }
  return records;
}

nb::list image_rows(const kir::Binary& b) {
  // Tuples of plain values: the table needs ten of image_records' eighteen fields,
  // and a dict per image cost the listing more than its formatting (issue 15).
  nb::list rows;
  uint32_t index = 0;
  for (uint32_t c = 0; c < b.containers().size(); ++c) {
    for (const kir::Image& i : b.containers()[c].images) {
      nb::object version = nb::none();
      if (i.fatbin)
        version = nb::str((std::to_string(i.fatbin->major) + "." + std::to_string(i.fatbin->minor)).c_str());
      rows.append(nb::make_tuple(index++, c, kir::name(i.kind), i.target, version, kir::name(i.compression),
                                 i.stored.size(), i.size, i.id, i.fatbin && i.fatbin->obfuscated()));
    }
  }
  return rows;
}

/// Every container as the dict `kir inspect --json` prints.
nb::list container_records(const kir::Binary& b) {
  nb::list records;
  for (uint32_t c = 0; c < b.containers().size(); ++c) {
    const kir::ContainerSite& site = b.containers()[c];
    nb::object wrapper = nb::none();
    if (site.wrapper) {
      const kir::FatbinWrapper& w = b.wrappers()[*site.wrapper];
      nb::dict wd;
      wd[key("file_offset")] = w.file_offset;
      wd[key("hip")] = w.hip;
      wd[key("version")] = w.version;
      wd[key("prelinked")] = w.prelinked_offsets.size();
      wrapper = wd;
    }
    nb::dict d;
    d[key("index")] = c;
    d[key("member")] = site.member;
    d[key("section")] = site.section;
    d[key("file_offset")] = site.file_offset;
    d[key("format")] = kir::name(site.format);
    d[key("size")] = site.size;
    d[key("version")] = site.version;
    d[key("compression")] = site.compression;
    d[key("found_by")] = kir::found_by_name(site.found_by);
    d[key("wrapper")] = wrapper;
    records.append(d);
  }
  return records;
}

namespace {

/// The images (or containers) that `indices` names, every one when it is None.
std::vector<uint32_t> chosen(nb::object indices, size_t count) {
  std::vector<uint32_t> out;
  if (indices.is_none()) {
    out.resize(count);
    for (uint32_t i = 0; i < count; ++i) out[i] = i;
    return out;
  }
  for (nb::handle i : indices) {
    int64_t v = nb::cast<int64_t>(i);
    if (v < 0 || static_cast<uint64_t>(v) >= count) throw nb::index_error("no such index");
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

/// `v` as json.dumps writes an optional integer.
template <class T>
std::string json_number(const std::optional<T>& v) {
  return v ? std::to_string(*v) : "null";
}

}  // namespace

nb::object image_records_json(const kir::Binary& b, nb::object indices) {
  // Byte for byte json.dumps(records, separators=(",", ":")) of image_records()'s
  // dicts (those `indices` names) with each one's "target" (= "arch") appended, as
  // kir.report.build_report makes them: the JSON of cuBLAS's 5,666 images without a
  // dict each (issue 26: `kir inspect --json libcublasLt.so.13` spent most of its
  // time in json.dumps). None when a text needs json.dumps's own escaping, or a
  // string map repeats a key (a dict would keep one): the caller takes the dicts.
  std::vector<const kir::Image*> all;
  std::vector<uint32_t> container_of;
  for (uint32_t c = 0; c < b.containers().size(); ++c)
    for (const kir::Image& i : b.containers()[c].images) {
      all.push_back(&i);
      container_of.push_back(c);
    }
  std::string out = "[";
  out.reserve(all.size() * 360);
  std::unordered_map<uint64_t, std::string> flags_json;  // few distinct values: each written once
  std::unordered_map<std::string, std::string> options_json;
  auto number = [&out](uint64_t v) {
    char digits[24];
    out.append(digits, std::to_chars(digits, digits + sizeof digits, v).ptr);
  };
  bool first = true;
  for (uint32_t index : chosen(indices, all.size())) {
    const kir::Image& i = *all[index];
    out += first ? "{\"index\":" : ",{\"index\":";
    first = false;
    number(index);
    out += ",\"container\":";
    number(container_of[index]);
    out += ",\"entry\":";
    number(i.index);
    out += ",\"kind\":";
    if (!append_json_string(out, kir::name(i.kind))) return nb::none();
    out += ",\"arch\":";
    if (!append_json_string(out, i.target)) return nb::none();
    out += ",\"triple\":";
    if (!append_json_string(out, i.triple)) return nb::none();
    out += ",\"id\":";
    if (!append_json_string(out, i.id)) return nb::none();
    out += ",\"compression\":";
    if (!append_json_string(out, kir::name(i.compression))) return nb::none();
    out += ",\"size\":";
    number(i.size);
    out += ",\"stored_size\":";
    number(i.stored.size());
    out += ",\"file_offset\":";
    if (i.file_offset) number(*i.file_offset);
    else out += "null";
    out += ",\"version\":";
    const std::optional<kir::FatbinEntry>& e = i.fatbin;
    if (e) {
      out += '[';
      number(e->major);
      out += ',';
      number(e->minor);
      out += ']';
    } else {
      out += "null";
    }
    out += ",\"flags\":";
    if (e) {
      auto found = flags_json.find(e->flags);
      if (found == flags_json.end()) {
        std::string text = "[";
        std::vector<std::string> names = kir::fatbin_flag_names(e->flags);
        for (size_t n = 0; n < names.size(); ++n) {
          if (n) text += ',';
          if (!append_json_string(text, names[n])) return nb::none();
        }
        found = flags_json.emplace(e->flags, text + "]").first;
      }
      out += found->second;
    } else {
      out += "[]";
    }
    out += ",\"obfuscated\":";
    out += e && e->obfuscated() ? "true" : "false";
    out += ",\"identifier\":";
    if (!append_json_string(out, e ? std::string(e->identifier) : std::string())) return nb::none();
    out += ",\"options\":";
    if (e) {
      std::string raw(e->options);
      auto found = options_json.find(raw);
      if (found == options_json.end()) {
        std::string text;
        if (!append_json_string(text, options_text(raw))) return nb::none();
        found = options_json.emplace(std::move(raw), std::move(text)).first;
      }
      out += found->second;
    } else {
      out += "\"\"";
    }
    out += ",\"strings\":{";
    for (size_t n = 0; n < i.strings.size(); ++n) {
      for (size_t m = 0; m < n; ++m)
        if (i.strings[m].first == i.strings[n].first) return nb::none();
      if (n) out += ',';
      if (!append_json_string(out, i.strings[n].first)) return nb::none();
      out += ':';
      if (!append_json_string(out, i.strings[n].second)) return nb::none();
    }
    out += "},\"target\":";
    if (!append_json_string(out, i.target)) return nb::none();
    out += '}';
  }
  out += ']';
  return nb::str(out.data(), out.size());
}

nb::object container_records_json(const kir::Binary& b, nb::object indices) {
  // Byte for byte json.dumps(records, separators=(",", ":")) of container_records()'s
  // dicts that `indices` names; None when a text needs json.dumps's own escaping.
  std::string out = "[";
  bool first = true;
  for (uint32_t c : chosen(indices, b.containers().size())) {
    const kir::ContainerSite& site = b.containers()[c];
    out += first ? "{\"index\":" : ",{\"index\":";
    first = false;
    out += std::to_string(c) + ",\"member\":";
    if (!append_json_string(out, site.member)) return nb::none();
    out += ",\"section\":";
    if (!append_json_string(out, site.section)) return nb::none();
    out += ",\"file_offset\":" + std::to_string(site.file_offset) + ",\"format\":";
    if (!append_json_string(out, kir::name(site.format))) return nb::none();
    out +=
        ",\"size\":" + std::to_string(site.size) + ",\"version\":" + std::to_string(site.version) + ",\"compression\":";
    if (!append_json_string(out, site.compression)) return nb::none();
    out += ",\"found_by\":";
    if (!append_json_string(out, kir::found_by_name(site.found_by))) return nb::none();
    out += ",\"wrapper\":";
    if (site.wrapper) {
      const kir::FatbinWrapper& w = b.wrappers()[*site.wrapper];
      out += "{\"file_offset\":" + std::to_string(w.file_offset) + ",\"hip\":" + (w.hip ? "true" : "false") +
             ",\"version\":" + std::to_string(w.version) +
             ",\"prelinked\":" + std::to_string(w.prelinked_offsets.size()) + "}";
    } else {
      out += "null";
    }
    out += '}';
  }
  out += ']';
  return nb::str(out.data(), out.size());
}

}  // namespace kir_bindings
