// kir._core: the nanobind module over libkir.
//
// Bindings stay thin: one Python class per C++ type, the same names, and one
// place (raise_if_error) where a kir::Error becomes a Python kir.KirError.
// Long-running calls release the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cctype>
#include <stdexcept>
#include <unordered_map>

#include "kir/amdgpu/code_object.hpp"
#include "kir/binary.hpp"
#include "kir/cache.h"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/discover.hpp"
#include "kir/hash/hash.hpp"
#include "kir/hash/kernel_code.hpp"
#include "kir/hash/omp_region.hpp"
#include "kir/hash/proteus.hpp"
#include "kir/hooks.h"
#include "kir/kir.h"
#include "kir/model.hpp"
#include "kir/object/elf.hpp"
#include "kir/support/demangle.hpp"
#include "kir/support/kernel_pattern.hpp"
#include "recording.hpp"
#include "records.hpp"

namespace nb = nanobind;
using namespace nb::literals;

// kir/model.hpp's enums cross into Python as the str-enums of kir.model
// (python/kir/model.py), which that module builds from name_table(): one list
// of names, in C++. Members are str, so JSON and comparisons see the names.
namespace kir_bindings {

/// The Python enum kir.model.<cls> and its members in enum order; imported on
/// first use and kept for the process (retried while the import fails).
struct ModelEnumClass {
  PyObject* type = nullptr;
  PyObject* members = nullptr;  // tuple
};

inline const ModelEnumClass* model_enum(ModelEnumClass& slot, const char* cls) noexcept {
  if (slot.members) return &slot;
  try {
    nb::object type = nb::module_::import_("kir.model").attr(cls);
    nb::tuple members(type);
    slot.type = type.release().ptr();
    slot.members = members.release().ptr();
    return &slot;
  } catch (nb::python_error& e) {
    e.restore();
    return nullptr;
  }
}

template <class Enum, unsigned Count, std::optional<Enum> (*FromName)(std::string_view)>
struct ModelEnumCaster {
  static const ModelEnumClass* py(const char* cls) noexcept {
    static ModelEnumClass slot;
    return model_enum(slot, cls);
  }
  static nb::handle cast_out(Enum v, const char* cls) noexcept {
    const ModelEnumClass* e = py(cls);
    if (!e) return nb::handle();
    unsigned i = static_cast<unsigned>(v);
    if (i >= Count) i = 0;  // out of range: the table's first name, as kir::name() does
    return nb::handle(PyTuple_GetItem(e->members, Py_ssize_t(i))).inc_ref();
  }
  /// Members of the enum and, when converting, plain str names from the table.
  static bool cast_in(nb::handle src, uint8_t flags, const char* cls, Enum& out) noexcept {
    if (!PyUnicode_Check(src.ptr())) return false;
    if (!(flags & uint8_t(nb::detail::cast_flags::convert))) {
      const ModelEnumClass* e = py(cls);
      if (!e) return PyErr_Clear(), false;
      if (PyObject_IsInstance(src.ptr(), e->type) != 1) return PyErr_Clear(), false;
    }
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(src.ptr(), &size);
    if (!text) return PyErr_Clear(), false;
    std::optional<Enum> e = FromName(std::string_view(text, size_t(size)));
    if (e) out = *e;
    return e.has_value();
  }
};

/// kir::ArgType <-> kir.model.ArgType, an IntEnum whose values are the ARG record's
/// type byte (kir.h's KIR_ARG_*): its members, and when converting an int 1..15 or
/// a name of the table ("f64", "bool").
struct ArgTypeCaster {
  static const ModelEnumClass* py() noexcept {
    static ModelEnumClass slot;
    return model_enum(slot, "ArgType");
  }
  static nb::handle cast_out(kir::ArgType v) noexcept {
    const ModelEnumClass* e = py();
    if (!e) return nb::handle();
    unsigned i = static_cast<unsigned>(v);
    if (!kir::is_arg_type(i)) return nb::int_(i).release();  // not a member: the number
    return nb::handle(PyTuple_GetItem(e->members, Py_ssize_t(i - 1))).inc_ref();
  }
  static bool cast_in(nb::handle src, uint8_t flags, kir::ArgType& out) noexcept {
    const bool convert = flags & uint8_t(nb::detail::cast_flags::convert);
    if (PyUnicode_Check(src.ptr())) {
      if (!convert) return false;
      Py_ssize_t size = 0;
      const char* text = PyUnicode_AsUTF8AndSize(src.ptr(), &size);
      if (!text) return PyErr_Clear(), false;
      std::optional<kir::ArgType> t = kir::arg_type_from_name(std::string_view(text, size_t(size)));
      if (t) out = *t;
      return t.has_value();
    }
    if (!PyLong_Check(src.ptr()) || PyBool_Check(src.ptr())) return false;
    if (!convert) {
      const ModelEnumClass* e = py();
      if (!e) return PyErr_Clear(), false;
      if (PyObject_IsInstance(src.ptr(), e->type) != 1) return PyErr_Clear(), false;
    }
    long value = PyLong_AsLong(src.ptr());
    if (value == -1 && PyErr_Occurred()) return PyErr_Clear(), false;
    if (value < 0 || !kir::is_arg_type(unsigned(value))) return false;
    out = static_cast<kir::ArgType>(value);
    return true;
  }
};

}  // namespace kir_bindings

namespace nanobind::detail {
template <>
struct type_caster<kir::ArgType> {
  NB_TYPE_CASTER(kir::ArgType, const_name("kir.model.ArgType"))
  bool from_python(handle src, uint8_t flags, cleanup_list*) noexcept {
    return kir_bindings::ArgTypeCaster::cast_in(src, flags, value);
  }
  static handle from_cpp(kir::ArgType v, rv_policy, cleanup_list*) noexcept {
    return kir_bindings::ArgTypeCaster::cast_out(v);
  }
};
}  // namespace nanobind::detail

#define KIR_MODEL_ENUM_CASTER(Enum, Count, FromName, Cls)                                                \
  namespace nanobind::detail {                                                                           \
  template <>                                                                                            \
  struct type_caster<Enum> {                                                                             \
    using Base = kir_bindings::ModelEnumCaster<Enum, Count, FromName>;                                   \
    NB_TYPE_CASTER(Enum, const_name("kir.model." Cls))                                                   \
    bool from_python(handle src, uint8_t flags, cleanup_list*) noexcept {                                \
      return Base::cast_in(src, flags, Cls, value);                                                      \
    }                                                                                                    \
    static handle from_cpp(Enum v, rv_policy, cleanup_list*) noexcept { return Base::cast_out(v, Cls); } \
  };                                                                                                     \
  }

KIR_MODEL_ENUM_CASTER(kir::ImageKind, kir::kImageKinds, kir::image_kind_from_name, "ImageKind")
KIR_MODEL_ENUM_CASTER(kir::CodeKind, kir::kCodeKinds, kir::code_kind_from_name, "CodeKind")
KIR_MODEL_ENUM_CASTER(kir::TargetKind, kir::kTargetKinds, kir::target_kind_from_name, "TargetKind")
KIR_MODEL_ENUM_CASTER(kir::AllocationKind, kir::kAllocationKinds, kir::allocation_kind_from_name, "AllocationKind")
KIR_MODEL_ENUM_CASTER(kir::JitArgKind, kir::kJitArgKinds, kir::jit_arg_kind_from_name, "JitArgKind")
KIR_MODEL_ENUM_CASTER(kir::ContainerFormat, kir::kContainerFormats, kir::container_format_from_name, "ContainerFormat")
KIR_MODEL_ENUM_CASTER(kir::Codec, kir::kCodecs, kir::codec_from_name, "Codec")

namespace {

// kir.errors' exception class of each kir::ErrorCode (KirError's subclasses), kept for the process.
PyObject* kir_error_types[kir::kErrorCodes] = {};

[[noreturn]] void raise(const kir::Error& e) { kir_bindings::raise_kir_error(e); }

template <class T>
T value_or_raise(kir::Expected<T>&& x) {
  if (!x) raise(x.error());
  return std::move(*x);
}

nb::bytes to_bytes(const std::vector<uint8_t>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

void bind_device_code(nb::module_& m) {
  nb::class_<kir::Kernel>(m, "Kernel", "A kernel (entry point) of a device image.")
      .def_ro("name", &kir::Kernel::name, "Mangled name.")
      .def_ro("demangled", &kir::Kernel::demangled, "Demangled C++ name (the name itself when not mangled).")
      .def_prop_ro(
          "params",
          [](const kir::Kernel& k) {
            nb::object param = nb::module_::import_("kir.model").attr("Param");
            nb::list out;
            for (const kir::KernelParam& p : k.params) out.append(param(p.ordinal, p.offset, p.size));
            return out;
          },
          "The parameters' layout (kir.model.Param).")
      .def_prop_ro("param_count", [](const kir::Kernel& k) { return k.params.size(); })
      .def_prop_ro(
          "layout",
          [](const kir::Kernel& k) {
            std::string out;
            for (const kir::KernelParam& p : k.params) {
              if (!out.empty()) out += ' ';
              out += std::to_string(p.offset) + ':' + std::to_string(p.size);
            }
            return out;
          },
          "The parameter layout as text: 'offset:size' per parameter.")
      .def_ro("param_bytes", &kir::Kernel::param_bytes, "Total parameter buffer size, if known.")
      .def_ro("registers", &kir::Kernel::registers, "Registers per thread, if recorded.")
      .def_ro("shared_bytes", &kir::Kernel::shared_bytes, "Static shared memory, if known.")
      .def_ro("frame_bytes", &kir::Kernel::frame_bytes, "Per-thread stack frame, if recorded.")
      .def_ro("max_threads", &kir::Kernel::max_threads, "__launch_bounds__ block size (x, y, z).")
      .def_ro("required_threads", &kir::Kernel::required_threads, "Required block size (x, y, z).")
      .def_ro("cluster_dims", &kir::Kernel::cluster_dims, "__cluster_dims__ (x, y, z).")
      .def_ro("code_bytes", &kir::Kernel::code_bytes, "Size of the kernel's machine code.")
      .def("__repr__", [](const kir::Kernel& k) { return "Kernel('" + k.name + "')"; });

  nb::class_<kir::DeviceGlobal>(m, "DeviceGlobal", "A global variable of a device image.")
      .def_ro("name", &kir::DeviceGlobal::name)
      .def_ro("section", &kir::DeviceGlobal::section, "Cubin section ('' for PTX).")
      .def_ro("size", &kir::DeviceGlobal::size)
      .def("__repr__", [](const kir::DeviceGlobal& g) { return "DeviceGlobal('" + g.name + "')"; });

  nb::class_<kir::EmbeddedModule>(m, "EmbeddedModule", "LLVM IR the Proteus pass embedded in device code.")
      .def_ro("name", &kir::EmbeddedModule::name, "The symbol or section name.")
      .def_ro("kernel", &kir::EmbeddedModule::kernel, "HIP per-kernel sections: the mangled kernel.")
      .def_ro("md5", &kir::EmbeddedModule::md5, "HIP: the hex field of the section name.")
      .def_ro("hash", &kir::EmbeddedModule::hash, "HIP: the decimal hash field of the section name.")
      .def_prop_ro("bitcode",
                   [](const kir::EmbeddedModule& e) {
                     return nb::bytes(reinterpret_cast<const char*>(e.bitcode.data()), e.bitcode.size());
                   })
      .def_ro("digest", &kir::EmbeddedModule::digest, "XXH3-128 of the bitcode.")
      .def("__repr__", [](const kir::EmbeddedModule& e) { return "EmbeddedModule('" + e.name + "')"; });

  nb::class_<kir::DeviceCode>(m, "DeviceCode", "Kernels, functions and globals of one image.")
      .def(nb::init<>())
      .def("records", &kir_bindings::code_records, "kernels"_a = true,
           "The same content as plain dicts and lists (the `kir inspect --json` form); with "
           "kernels=False its \"kernels\" list is left empty (kernels_json gives it as text).")
      .def("kernels_json", &kir_bindings::kernels_json, "links"_a,
           "The kernels' list as `json.dumps(..., separators=(',', ':'))` writes records()'s, each with "
           "\"ir_module\" from `links` (name -> IR module index, else null); None when a name holds a "
           "byte outside printable ASCII (json.dumps escapes those: take records() then).")
      .def_ro("kernels", &kir::DeviceCode::kernels)
      .def(
          "kernel_rows",
          [](const kir::DeviceCode& code) {
            // One tuple of plain values per kernel: reading `kernels` from Python copies
            // every kernel and its parameters into objects (issue 15: kir inspect --kernels).
            nb::list rows;
            for (const kir::Kernel& k : code.kernels) {
              std::string layout;
              for (const kir::KernelParam& p : k.params) {
                layout += ' ';
                layout += std::to_string(p.offset);
                layout += ':';
                layout += std::to_string(p.size);
              }
              nb::object registers = k.registers ? nb::cast(*k.registers) : nb::none();
              nb::object shared = k.shared_bytes ? nb::cast(*k.shared_bytes) : nb::none();
              rows.append(nb::make_tuple(k.name, k.demangled, k.params.size(), layout, registers, shared));
            }
            return rows;
          },
          "Per kernel: (name, demangled, parameter count, layout ' OFFSET:SIZE...', registers or None, "
          "static shared bytes or None).")
      .def_ro("functions", &kir::DeviceCode::functions, "Defined functions that are not kernels.")
      .def_ro("globals", &kir::DeviceCode::globals)
      .def_ro("target", &kir::DeviceCode::target, "AMDGPU code objects: the target id.")
      .def_ro("ir", &kir::DeviceCode::ir, "LLVM IR embedded by the Proteus pass.")
      .def_ro("kind", &kir::DeviceCode::kind, "The kind of image it was decoded from: cubin, ptx or code-object.")
      .def_rw("image_digest", &kir::DeviceCode::image_digest,
              "XXH3-128 of the decoded image, when decoded with digests=True.");

  nb::class_<kir::KernelCode>(m, "KernelCode", "What a kernel's static hash covers (kir/hash/kernel_code.hpp).")
      .def_ro("kind", &kir::KernelCode::kind, "'ir', or the image's kind; 'unknown' without IR or an image digest.")
      .def_ro("modules", &kir::KernelCode::modules, "Indices into DeviceCode.ir (kind 'ir').")
      .def_ro("digests", &kir::KernelCode::digests, "The MODULE records' digests.");
  m.def("kernel_code", &kir::kernel_code, "code"_a, "kernel"_a,
        "The static-hash policy: which of the image's bytes kernel `kernel` is hashed over.");
  m.def("kernel_static_hash", &kir::kernel_static_hash, "code"_a, "kernel"_a,
        "The kernel's static hash under the policy (None without IR or an image digest).");

  m.def("demangle", &kir::demangle, "name"_a, "Itanium C++ demangling.");
  nb::class_<kir::KernelPattern>(
      m, "KernelPattern",
      "A kernel-name pattern (`--kernel REGEX`; kir/support/kernel_pattern.hpp): kir's dialect and "
      "engine (no recursion, no backtracking), the rule the hook's clients use in the app.")
      .def(
          "__init__",
          [](kir::KernelPattern* self, std::string_view pattern) {
            new (self) kir::KernelPattern(value_or_raise(kir::KernelPattern::create(pattern)));
          },
          "pattern"_a, "KirError naming the construct and its offset when kir refuses `pattern`.")
      .def_prop_ro("pattern", &kir::KernelPattern::pattern)
      .def_prop_ro("program_size", &kir::KernelPattern::program_size,
                   "The compiled NFA's instructions (at most kir::KernelPattern::kMaxProgram).")
      .def("search", &kir::KernelPattern::search, "text"_a, "Whether `text` contains a match.")
      .def("selects", nb::overload_cast<std::string_view>(&kir::KernelPattern::selects, nb::const_), "name"_a,
           "Whether the mangled name `name`, or its demangled name, contains a match.")
      .def("selects", nb::overload_cast<std::string_view, std::string_view>(&kir::KernelPattern::selects, nb::const_),
           "name"_a, "demangled"_a, "The same, with demangle(name) at hand.");
  m.def("fatbin_flag_names", &kir::fatbin_flag_names, "flags"_a, "Names of the set bits of a fatbin entry's flags.");
  m.def(
      "parse_cubin",
      [](nb::bytes data) {
        return value_or_raise(
            kir::parse_cubin(kir::ByteView(reinterpret_cast<const uint8_t*>(data.c_str()), data.size())));
      },
      "data"_a, "Kernels and globals of a cubin given as bytes.");
  m.def(
      "cubin_arch",
      [](nb::bytes data) {
        kir::ByteView bytes(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
        if (kir::classify_elf(bytes) != kir::ImageKind::cubin) throw nb::value_error("not a cubin (an EM_CUDA ELF)");
        return kir::cubin_arch(bytes);
      },
      "data"_a, "A cubin's architecture (\"sm_90\") from its ELF header's e_flags.");
  m.def(
      "parse_code_object",
      [](nb::bytes data) {
        return value_or_raise(
            kir::parse_code_object(kir::ByteView(reinterpret_cast<const uint8_t*>(data.c_str()), data.size())));
      },
      "data"_a, "Kernels, target id and embedded IR of an AMDGPU code object given as bytes.");
  m.def(
      "parse_ptx",
      [](nb::bytes data) {
        return value_or_raise(
            kir::parse_ptx(kir::ByteView(reinterpret_cast<const uint8_t*>(data.c_str()), data.size())));
      },
      "data"_a, "Kernels and globals of PTX text given as bytes.");
}

/// The name tables of kir/model.hpp, for kir.model to build its enums from.
void bind_model(nb::module_& m) {
  m.def(
      "name_table",
      [](std::string_view which) {
        auto table = [](auto first, unsigned count) {
          nb::list out;
          for (unsigned i = 0; i < count; ++i) out.append(kir::name(static_cast<decltype(first)>(i)));
          return nb::tuple(out);
        };
        if (which == "image") return table(kir::ImageKind{}, kir::kImageKinds);
        if (which == "code") return table(kir::CodeKind{}, kir::kCodeKinds);
        if (which == "target") return table(kir::TargetKind{}, kir::kTargetKinds);
        if (which == "allocation") return table(kir::AllocationKind{}, kir::kAllocationKinds);
        if (which == "jit-arg") return table(kir::JitArgKind{}, kir::kJitArgKinds);
        if (which == "container") return table(kir::ContainerFormat{}, kir::kContainerFormats);
        if (which == "codec") return table(kir::Codec{}, kir::kCodecs);
        if (which == "arg") {  // values 1..kArgTypes
          nb::list out;
          for (unsigned i = 1; i <= kir::kArgTypes; ++i) out.append(kir::name(static_cast<kir::ArgType>(i)));
          return nb::tuple(out);
        }
        throw nb::value_error(("no name table '" + std::string(which) +
                               "': expected image, code, target, allocation, arg, jit-arg, container or "
                               "codec")
                                  .c_str());
      },
      "which"_a,
      "The names of one kir/model.hpp enum ('image', 'code', 'target', 'allocation', 'arg', 'jit-arg', "
      "'container', 'codec'), in enum order ('arg': ArgType's values 1, 2, ...).");
  m.def(
      "arg_types",
      [] {
        nb::list out;
        for (unsigned i = 1; i <= kir::kArgTypes; ++i) {
          auto t = static_cast<kir::ArgType>(i);
          const char* format = kir::struct_format(t);
          out.append(
              nb::make_tuple(i, kir::name(t), kir::size_of(t), *format ? nb::object(nb::str(format)) : nb::none()));
        }
        return nb::tuple(out);
      },
      "Every ArgType as (value, name, size in bytes (0: no fixed size), little-endian struct "
      "format or None), in value order.");
  m.def("target_kind_of", &kir::target_kind_of, "target"_a,
        "A target's family: 'sm_90' cuda, 'gfx90a:xnack+' amdgpu, '' none, else host.");
  m.def("code_kind_of", &kir::code_kind_of, "kind"_a,
        "The code kind of an image kind (cubin, ptx, code-object), else unknown.");
}

void bind_fatbin(nb::module_& m) {
  nb::class_<kir::FatbinEntry>(m, "FatbinEntry", "One device image's header; a view into the file.")
      .def_ro("index", &kir::FatbinEntry::index)
      .def_ro("offset", &kir::FatbinEntry::offset, "Offset from the container start.")
      .def_ro("kind", &kir::FatbinEntry::kind, "1 PTX, 2 cubin, 4 old cubin, 8 LTO-IR.")
      .def_prop_ro(
          "image_kind", [](const kir::FatbinEntry& e) { return kir::fatbin_image_kind(e.kind); },
          "The kind as an ImageKind ('unknown' for kinds kir does not know).")
      .def_ro("format_version", &kir::FatbinEntry::format_version)
      .def_ro("header_size", &kir::FatbinEntry::header_size)
      .def_ro("payload_size", &kir::FatbinEntry::payload_size, "Padded payload size.")
      .def_ro("compressed_size", &kir::FatbinEntry::compressed_size)
      .def_ro("uncompressed_size", &kir::FatbinEntry::uncompressed_size)
      .def_ro("options_offset", &kir::FatbinEntry::options_offset)
      .def_ro("major", &kir::FatbinEntry::major)
      .def_ro("minor", &kir::FatbinEntry::minor)
      .def_ro("sm", &kir::FatbinEntry::arch, "The header's raw SM number (90 for sm_90).")
      .def_prop_ro(
          "arch", [](const kir::FatbinEntry& e) { return "sm_" + std::to_string(e.arch); },
          "The target as everywhere else in kir: 'sm_90' (the raw number is `sm`).")
      .def_ro("flags", &kir::FatbinEntry::flags)
      .def_prop_ro("flag_names", [](const kir::FatbinEntry& e) { return kir::fatbin_flag_names(e.flags); })
      .def_ro("obfuscation_key", &kir::FatbinEntry::obfuscation_key)
      .def_prop_ro("obfuscated", &kir::FatbinEntry::obfuscated)
      .def_prop_ro(
          "compression", [](const kir::FatbinEntry& e) { return e.compression(); },
          "'none', 'lz4', 'zstd' or 'unknown'.")
      .def_prop_ro("identifier", [](const kir::FatbinEntry& e) { return std::string(e.identifier); })
      .def_prop_ro(
          "options", [](const kir::FatbinEntry& e) { return nb::bytes(e.options.data(), e.options.size()); },
          "Raw options text (binary on sm_100+ cubins).")
      .def_prop_ro("payload_file_offset", [](const kir::FatbinEntry& e) { return e.payload.origin(); })
      .def_prop_ro(
          "stored_size", [](const kir::FatbinEntry& e) { return e.payload.size(); },
          "Bytes stored (the compressed size when compressed).")
      .def_prop_ro("image_size", &kir::FatbinEntry::image_size, "Bytes once decompressed.")
      .def(
          "read",
          [](const kir::FatbinEntry& e) {
            kir::Expected<std::vector<uint8_t>> bytes = [&] {
              nb::gil_scoped_release release;
              return kir::read_image(e);
            }();
            return to_bytes(value_or_raise(std::move(bytes)));
          },
          "The image bytes, decompressed.");

  nb::class_<kir::FatbinWrapper>(m, "FatbinWrapper",
                                 "A __fatBinC_Wrapper_t from .nvFatBinSegment (or .hipFatBinSegment).")
      .def_ro("member", &kir::FatbinWrapper::member)
      .def_ro("hip", &kir::FatbinWrapper::hip, "True for HIP's wrappers (magic HIPF).")
      .def_ro("file_offset", &kir::FatbinWrapper::file_offset)
      .def_ro("version", &kir::FatbinWrapper::version)
      .def_ro("container_offset", &kir::FatbinWrapper::container_offset)
      .def_ro("prelinked_offsets", &kir::FatbinWrapper::prelinked_offsets);

  nb::class_<kir::Image>(m, "Image", "A device image or embedded module; a view into the file.")
      .def_ro("index", &kir::Image::index, "Position in its container.")
      .def_ro("kind", &kir::Image::kind, "'cubin', 'ptx', 'lto-ir', 'old-cubin', 'code-object', 'bitcode', 'host', ...")
      .def_ro("target", &kir::Image::target, "'sm_90', 'gfx90a:xnack+', or ''.")
      .def_prop_ro("target_kind", &kir::Image::target_kind, "The target's family.")
      .def_ro("triple", &kir::Image::triple)
      .def_ro("id", &kir::Image::id, "Bundle entry id, or the fatbin entry's identifier.")
      .def_ro("compression", &kir::Image::compression, "'none', 'lz4', 'zstd' or 'unknown'.")
      .def_ro("file_offset", &kir::Image::file_offset,
              "Offset of the stored bytes in the file (None when they are not in it as is).")
      .def_prop_ro("stored_size", [](const kir::Image& i) { return i.stored.size(); })
      .def_ro("size", &kir::Image::size, "Bytes once decoded.")
      .def_ro("fatbin", &kir::Image::fatbin, "CUDA: the fatbin entry's header fields, else None.")
      .def_prop_ro(
          "strings",
          [](const kir::Image& i) {
            nb::dict d;
            for (const auto& [k, v] : i.strings) d[nb::str(k.c_str())] = v;
            return d;
          },
          "An offloading binary entry's string map; `command` for -fembed-bitcode modules.")
      .def(
          "read",
          [](const kir::Image& i) {
            kir::Scratch scratch;
            kir::Expected<kir::ByteView> bytes = [&] {
              nb::gil_scoped_release release;
              return kir::decode_image(i, scratch);
            }();
            kir::ByteView view = value_or_raise(std::move(bytes));
            return nb::bytes(reinterpret_cast<const char*>(view.data()), view.size());
          },
          "The image bytes, decoded.");

  nb::class_<kir::ContainerSite>(m, "Container", "A container of images and where it was found.")
      .def_ro("member", &kir::ContainerSite::member, "Archive member ('' outside archives).")
      .def_ro("section", &kir::ContainerSite::section)
      .def_ro("file_offset", &kir::ContainerSite::file_offset)
      .def_prop_ro(
          "found_by", [](const kir::ContainerSite& c) { return kir::found_by_name(c.found_by); },
          "'section', 'wrapper' or 'scan'.")
      .def_ro("format", &kir::ContainerSite::format,
              "'cuda-fatbin', 'offload-bundle', 'object-bundle', 'offload-binary', 'bitcode-section' "
              "or 'device-elf'.")
      .def_ro("wrapper", &kir::ContainerSite::wrapper, "Index of the wrapper pointing here.")
      .def_ro("version", &kir::ContainerSite::version)
      .def_ro("size", &kir::ContainerSite::size, "Bytes in the file.")
      .def_ro("compression", &kir::ContainerSite::compression, "A compressed bundle's codec, else ''.")
      .def_ro("images", &kir::ContainerSite::images, nb::rv_policy::reference_internal);
}

void bind_binary(nb::module_& m) {
  nb::class_<kir::Binary>(m, "Binary", "Every device-code container of one file.")
      .def_static(
          "open",
          [](const std::string& path, bool scan, bool scan_data) {
            kir::BinaryOptions options;
            options.scan = scan;
            options.scan_data = scan_data;
            kir::Expected<kir::Binary> b = [&] {
              nb::gil_scoped_release release;
              return kir::Binary::open(path, options);
            }();
            return value_or_raise(std::move(b));
          },
          "path"_a, "scan"_a = false, "scan_data"_a = true,
          "Open and index `path`. scan: also find containers of every format by magic in "
          "every section. scan_data: also find CUDA fatbins by magic in an ELF's data sections "
          "(.rodata, .data, .ldata, ...), where libraries such as cuFFT embed them.")
      .def_prop_ro("path", &kir::Binary::path)
      .def_prop_ro("format", &kir::Binary::format, "'elf', 'archive', 'fatbin' or 'offload-bundle'.")
      .def_prop_ro("members", &kir::Binary::members)
      .def_prop_ro("containers", &kir::Binary::containers, nb::rv_policy::reference_internal)
      .def_prop_ro("wrappers", &kir::Binary::wrappers, nb::rv_policy::reference_internal)
      .def("container_records", &kir_bindings::container_records,
           "Every container as a dict of the kir.inspect/3 JSON schema (docs/json-schema.md), in file order.")
      .def("image_records", &kir_bindings::image_records,
           "Every image as a dict of the kir.inspect/3 JSON schema (docs/json-schema.md), in file order.")
      .def("image_records_json", &kir_bindings::image_records_json, "indices"_a = nb::none(),
           "image_records()'s dicts (those of `indices`, else all) with each one's \"target\", as the JSON text "
           "json.dumps(..., separators=(',', ':')) writes; None when a text needs json.dumps's escaping.")
      .def("container_records_json", &kir_bindings::container_records_json, "indices"_a = nb::none(),
           "container_records()'s dicts (those of `indices`, else all) as the JSON text json.dumps(..., "
           "separators=(',', ':')) writes; None when a text needs json.dumps's escaping.")
      .def("image_rows", &kir_bindings::image_rows,
           "Every image as a tuple (index, container, kind, arch, fatbin version 'MAJOR.MINOR' or None, "
           "compression, stored size, size, id, obfuscated), in file order: the text table's fields.")
      .def(
          "device_code",
          [](const kir::Binary& b, uint32_t c, uint32_t e) {
            kir::Expected<kir::DeviceCode> code = [&] {
              nb::gil_scoped_release release;
              return b.device_code(c, e);
            }();
            return value_or_raise(std::move(code));
          },
          "container"_a, "entry"_a)
      .def(
          "device_code_of",
          [](const kir::Binary& b, std::vector<kir::Binary::ImageRef> images, unsigned threads,
             std::function<void(size_t, size_t)> progress, bool digests) {
            // The callback runs on a worker thread: take the GIL around it.
            std::function<void(size_t, size_t)> guarded;
            if (progress)
              guarded = [&progress](size_t done, size_t total) {
                nb::gil_scoped_acquire acquire;
                progress(done, total);
              };
            std::vector<kir::Expected<kir::DeviceCode>> all;
            {
              nb::gil_scoped_release release;
              all = b.device_code_of(images, threads, guarded, digests);
            }
            nb::list out;
            for (auto& x : all) {
              if (x) out.append(nb::cast(std::move(*x)));
              else out.append(nb::str(x.error().message().c_str()));
            }
            return out;
          },
          "images"_a, "threads"_a = 0, "progress"_a.none() = nb::none(), "digests"_a = false,
          "Device code of each (container, entry) in `images`, decoded in parallel, in that "
          "order; an image that fails gives its error message (str) instead. `digests` also "
          "records each decoded image's XXH3-128.");
}

/// An ELF file read by kir's own reader, as plain tuples (for tools and tests).
struct ElfListing {
  std::shared_ptr<const kir::MappedFile> file;  // a file's bytes, or
  std::vector<uint8_t> owned;                   // a copy of bytes handed over (moving keeps the buffer)
  kir::ElfFile elf;
};

ElfListing open_elf(const std::string& path) {
  auto file = value_or_raise(kir::MappedFile::open(path));
  kir::Expected<kir::ElfFile> elf = kir::ElfFile::create(file->bytes());
  if (!elf) elf.error().within(path);
  return {file, {}, value_or_raise(std::move(elf))};
}

ElfListing elf_of_bytes(const nb::bytes& data) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.c_str());
  std::vector<uint8_t> owned(bytes, bytes + data.size());
  kir::Expected<kir::ElfFile> elf = kir::ElfFile::create(kir::ByteView(owned.data(), owned.size()));
  return {nullptr, std::move(owned), value_or_raise(std::move(elf))};  // the views stay valid: the buffer moves
}

void bind_elf(nb::module_& m) {
  nb::class_<ElfListing>(m, "ElfFile", "kir's ELF64 reader over a mapped file.")
      .def_static("open", &open_elf, "path"_a)
      .def_static("from_bytes", &elf_of_bytes, "data"_a, "An ELF image in memory (a decoded cubin), copied.")
      .def_prop_ro("type", [](const ElfListing& f) { return f.elf.type(); })
      .def_prop_ro("machine", [](const ElfListing& f) { return f.elf.machine(); })
      .def(
          "sections",
          [](const ElfListing& f) {
            nb::list out;
            for (const kir::ElfSection& s : f.elf.sections())
              out.append(nb::make_tuple(s.index, s.name, s.type, s.flags, s.addr, s.offset, s.size, s.link, s.info,
                                        s.addralign, s.entsize));
            return out;
          },
          "(index, name, type, flags, addr, offset, size, link, info, addralign, entsize) tuples.")
      .def(
          "segments",
          [](const ElfListing& f) {
            nb::list out;
            for (const kir::ElfSegment& p : f.elf.segments())
              out.append(nb::make_tuple(p.type, p.flags, p.offset, p.vaddr, p.filesz, p.memsz));
            return out;
          },
          "(type, flags, offset, vaddr, filesz, memsz) tuples.")
      .def(
          "symbols",
          [](const ElfListing& f, bool dynamic) {
            nb::list out;
            const kir::ElfSection* table = f.elf.symbol_table(dynamic);
            if (!table) return out;
            for (const kir::ElfSymbol& s : value_or_raise(f.elf.symbols(*table)))
              out.append(nb::make_tuple(s.name, s.value, s.size, s.type, s.binding, s.other, s.section));
            return out;
          },
          "dynamic"_a = false, "(name, value, size, type, binding, other, section) tuples.");
}

kir::ByteView view_of(const nb::bytes& b) {
  return kir::ByteView(reinterpret_cast<const uint8_t*>(b.c_str()), b.size());
}

std::vector<kir::ByteView> views_of(const std::vector<nb::bytes>& list) {
  std::vector<kir::ByteView> out;
  for (const nb::bytes& b : list) out.push_back(view_of(b));
  return out;
}

void bind_hash(nb::module_& m) {
  nb::class_<kir::Hash128>(m, "Hash128",
                           "A 128-bit kir hash; str() gives its 32 hex digits, which it equals and hashes as.")
      .def(nb::init<>())
      .def_rw("high", &kir::Hash128::high)
      .def_rw("low", &kir::Hash128::low)
      .def_prop_ro("hex", &kir::Hash128::hex, "32 lowercase hex digits, high half first.")
      .def_static(
          "from_hex",
          [](const std::string& text) {
            std::optional<kir::Hash128> h = kir::Hash128::from_hex(text);
            if (!h) throw nb::value_error(("not a kir hash (32 lowercase hex digits): '" + text + "'").c_str());
            return *h;
          },
          "text"_a, "Parse exactly 32 lowercase hex digits (ValueError otherwise).")
      .def("__str__", &kir::Hash128::hex)
      .def("__repr__", [](const kir::Hash128& h) { return "Hash128('" + h.hex() + "')"; })
      .def("__eq__", [](const kir::Hash128& a, const kir::Hash128& b) { return a == b; })
      // The same hash as the 32 hex digits every other kir API carries (records, kir.hook,
      // JSON): equal, and hashed alike, so either may look the other up in a dict.
      .def("__eq__", [](const kir::Hash128& a, const std::string& b) { return a.hex() == b; })
      .def(
          "__eq__", [](const kir::Hash128&, nb::handle) { return nb::borrow<nb::object>(Py_NotImplemented); },
          nb::arg("other").none())
      .def("__hash__", [](const kir::Hash128& h) { return nb::hash(nb::str(h.hex().c_str())); });

  m.def(
      "xxh3_128",
      [](nb::bytes data) {
        kir::ByteView v = view_of(data);
        nb::gil_scoped_release release;
        return kir::xxh3_128(v);
      },
      "data"_a, "XXH3-128 (seed 0) of bytes, by the system xxhash library.");
  m.def(
      "static_hash",
      [](const std::string& name, const std::string& code_kind, const std::vector<nb::bytes>& modules) {
        return kir::static_hash(name, code_kind, views_of(modules));
      },
      "name"_a, "code_kind"_a, "modules"_a,
      "The static hash of a kernel: its mangled name, the kind of code ('ir', 'cubin', 'ptx', "
      "'code-object') and the code's bytes (IR modules in any order, or one image).");
  m.def(
      "static_hash_of_digests",
      [](const std::string& name, const std::string& code_kind, std::vector<kir::Hash128> digests) {
        return kir::static_hash_of_digests(name, code_kind, std::move(digests));
      },
      "name"_a, "code_kind"_a, "digests"_a,
      "static_hash() from the modules' xxh3_128 digests: hash each module once for many kernels.");
  m.def(
      "proteus_static_hash",
      [](const std::string& name, const std::vector<nb::bytes>& modules, bool llvm20_or_newer) {
        return kir::proteus_static_hash(name, views_of(modules), llvm20_or_newer);
      },
      "name"_a, "modules"_a, "llvm20_or_newer"_a = true,
      "Proteus's 64-bit static hash of a CUDA kernel whose binary's modules, in registration "
      "order, are `modules`.");
  m.def(
      "proteus_hash",
      [](nb::bytes data, bool llvm20_or_newer) { return kir::proteus_hash(view_of(data), llvm20_or_newer); }, "data"_a,
      "llvm20_or_newer"_a = true, "Proteus's hashValue of bytes: XXH3-64, or FNV-1a before LLVM 20.");
  m.def("proteus_hash_combine", &kir::proteus_hash_combine, "a"_a, "b"_a, "llvm20_or_newer"_a = true,
        "Proteus's hashCombine(a, b).");
  m.def(
      "proteus_cuda_module_hash",
      [](const std::vector<nb::bytes>& modules, bool llvm20_or_newer) {
        return kir::proteus_cuda_module_hash(views_of(modules), llvm20_or_newer);
      },
      "modules"_a, "llvm20_or_newer"_a = true,
      "Proteus's CUDA module hash: the fold of each module's hash, registration order (None for none).");
  m.def(
      "proteus_hip_module_hash",
      [](const kir::DeviceCode& code, bool llvm20_or_newer) {
        return value_or_raise(kir::proteus_hip_module_hash(code, llvm20_or_newer));
      },
      "code"_a, "llvm20_or_newer"_a = true,
      "Proteus's HIP module hash of a code object: the fold of its .jit.bitcode* sections' name "
      "suffixes, section order (None without such a section).");
  m.def("proteus_static_hash_of_module", &kir::proteus_static_hash_of_module, "name"_a, "module_hash"_a,
        "llvm20_or_newer"_a = true, "Proteus's createStaticHash: hashCombine(hash(name), module_hash).");
  m.def("fnv1a_64", [](nb::bytes data) { return kir::fnv1a_64(view_of(data)); }, "data"_a);

  // OpenMP target regions (kir/hash/omp_region.hpp, docs/hashing.md "OpenMP target regions").
  nb::class_<kir::OmpRegionName>(m, "OmpRegionName",
                                 "The parts of an OpenMP target region's kernel name, "
                                 "__omp_offloading_<device>_<file>_<parent>_l<line>[_<count>].")
      .def_ro("device_id", &kir::OmpRegionName::device_id, "st_dev of the source file (32 bits)")
      .def_ro("file_id", &kir::OmpRegionName::file_id, "st_ino of the source file (32 bits)")
      .def_ro("parent", &kir::OmpRegionName::parent, "the mangled name of the enclosing function")
      .def_ro("line", &kir::OmpRegionName::line)
      .def_ro("count", &kir::OmpRegionName::count, "0 when the name has no _<count> suffix")
      .def_prop_ro("normalized", &kir::normalized_omp_region_name,
                   "The name with the device and file ids written as 0: the same in every build.");
  m.def("parse_omp_region_name", &kir::parse_omp_region_name, "name"_a,
        "The parts of an OpenMP target region's kernel name; None when `name` is not one.");
  m.def(
      "zero_omp_region_ids",
      [](nb::bytes code) {
        std::string out = kir::zero_omp_region_ids(view_of(code));
        return nb::bytes(out.data(), out.size());
      },
      "code"_a, "The bytes with the hex digits of every __omp_offloading_<hex>_<hex>_ written as '0'.");
  m.def("omp_region_identity", &kir::omp_region_identity, "normalized_name"_a, "code_kind"_a, "code_digest"_a,
        "The region identity: XXH3-128 of HEADER('kir.omp-region', 1), NAME, CODE_KIND, MODULE(code_digest).");
  m.def(
      "omp_region_identity_of_image",
      [](const std::string& kernel, const std::string& image_kind, nb::bytes image) {
        return kir::omp_region_identity_of_image(kernel, image_kind, view_of(image));
      },
      "kernel"_a, "image_kind"_a, "image"_a,
      "The region identity of a kernel of a device image without IR (its ids zeroed in the image's "
      "bytes); None when the kernel is not an OpenMP region.");

  nb::enum_<kir::HashDomain>(m, "HashDomain", "The domain a DynamicHash builds (its HEADER record).")
      .value("jit_key", kir::HashDomain::jit_key)
      .value("launch_identity", kir::HashDomain::launch_identity)
      .value("dynamic_v1", kir::HashDomain::dynamic_v1);

  nb::class_<kir::DynamicHash>(m, "DynamicHash",
                               "Builds a JIT key (default), a launch identity or format 1's dynamic hash: "
                               "HEADER, static hash and arch, then records in the domain's order.")
      .def(nb::init<kir::HashDomain, const kir::Hash128&, std::string_view>(), "domain"_a, "static_hash"_a, "arch"_a)
      .def(nb::init<const kir::Hash128&, std::string_view>(), "static_hash"_a, "arch"_a)
      .def(
          "arg",
          [](kir::DynamicHash& h, uint32_t position, kir::ArgType type, nb::bytes value) -> kir::DynamicHash& {
            return h.arg(position, type, value.c_str(), value.size());
          },
          "position"_a, "type"_a, "value"_a, nb::rv_policy::reference_internal,
          "An ARG record: 1-based position, type, value bytes (little-endian).")
      .def(
          "capture",
          [](kir::DynamicHash& h, std::string_view lambda, uint32_t slot, uint32_t offset, kir::ArgType type,
             nb::bytes value) -> kir::DynamicHash& {
            return h.capture(lambda, slot, offset, type, value.c_str(), value.size());
          },
          "lambda_"_a, "slot"_a, "offset"_a, "type"_a, "value"_a, nb::rv_policy::reference_internal,
          "A CAPTURE record: a lambda's captured runtime constant.")
      .def("specialize", &kir::DynamicHash::specialize, "flags"_a, nb::rv_policy::reference_internal,
           "The SPECIALIZE record: 1 grid, 2 block, 4 bounds.")
      .def("grid", &kir::DynamicHash::grid, "x"_a, "y"_a, "z"_a, nb::rv_policy::reference_internal)
      .def("block", &kir::DynamicHash::block, "x"_a, "y"_a, "z"_a, nb::rv_policy::reference_internal)
      .def("bounds", &kir::DynamicHash::bounds, "max_threads"_a, "min_blocks"_a, nb::rv_policy::reference_internal)
      .def("shared", &kir::DynamicHash::shared, "bytes"_a, nb::rv_policy::reference_internal,
           "The SHARED record: dynamic shared memory bytes.")
      .def(
          "config",
          [](kir::DynamicHash& h, std::string_view key, nb::bytes value) -> kir::DynamicHash& {
            return h.config(key, std::string_view(value.c_str(), value.size()));
          },
          "key"_a, "value"_a, nb::rv_policy::reference_internal)
      .def("finish", &kir::DynamicHash::finish);

  // kir_jit_key (the C API) from Python values: the launch's parameters as bytes,
  // device memory as {address: bytes} regions read through read_memory.
  m.def(
      "jit_key_of_launch",
      [](const kir::Hash128& static_hash, const std::string& arch, const std::vector<std::optional<nb::bytes>>& params,
         const std::vector<std::tuple<uint32_t, uint8_t, uint8_t, bool, uint32_t, uint8_t, uint32_t>>& arg_fields,
         const std::map<uint64_t, nb::bytes>& memory, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
         bool specialize_grid, bool specialize_block, uint64_t shared_bytes, std::array<uint32_t, 2> bounds,
         const std::vector<std::pair<std::string, nb::bytes>>& config,
         const std::vector<std::tuple<std::string, uint32_t, uint32_t, uint8_t, nb::bytes>>& captures,
         std::optional<std::vector<uint32_t>> param_sizes, bool values) -> nb::object {
        std::vector<void*> args;
        std::vector<uint32_t> sizes;
        for (const std::optional<nb::bytes>& b : params) {
          args.push_back(b ? const_cast<char*>(b->c_str()) : nullptr);
          sizes.push_back(b ? uint32_t(b->size()) : 0);
        }
        if (param_sizes && param_sizes->size() != params.size())
          raise(kir::Error(kir::ErrorCode::invalid_argument, "param_sizes must have one size per parameter"));
        std::vector<kir_jit_arg> jit_args;
        for (const auto& [position, kind, type, by_value, count, count_type, count_position] : arg_fields)
          jit_args.push_back({position, kind, type, uint8_t(by_value), count_type, count, count_position});
        std::vector<kir_config_item> items;
        for (const auto& [key, value] : config) items.push_back({key.c_str(), value.c_str(), value.size()});
        std::vector<kir_jit_capture> caps;
        for (const auto& [lambda, slot, offset, type, value] : captures)
          caps.push_back({lambda.c_str(), slot, offset, type, value.c_str(), value.size()});
        struct Regions {
          std::vector<std::pair<uint64_t, std::string_view>> list;
        } regions;
        for (const auto& [address, bytes] : memory)
          regions.list.emplace_back(address, std::string_view(bytes.c_str(), bytes.size()));
        kir_jit_key_input in{};
        in.struct_size = sizeof in;
        in.static_hash = {static_hash.high, static_hash.low};
        in.arch = arch.c_str();
        in.args = args.data();
        in.param_sizes = param_sizes ? param_sizes->data() : sizes.data();
        in.param_count = uint32_t(params.size());
        in.jit_args = jit_args.data();
        in.jit_arg_count = jit_args.size();
        std::copy(grid.begin(), grid.end(), in.grid);
        std::copy(block.begin(), block.end(), in.block);
        in.shared_bytes = shared_bytes;
        in.specialize_grid = specialize_grid, in.specialize_block = specialize_block;
        in.max_threads = bounds[0], in.min_blocks = bounds[1];
        in.config = items.data(), in.config_count = items.size();
        in.captures = caps.data(), in.capture_count = caps.size();
        in.user = &regions;
        in.read_memory = [](void* user, uint64_t address, void* out, size_t size) -> int {
          for (const auto& [start, bytes] : static_cast<Regions*>(user)->list)
            if (address >= start && address - start <= bytes.size() && size <= bytes.size() - (address - start)) {
              std::memcpy(out, bytes.data() + (address - start), size);
              return 0;
            }
          return 1;
        };
        // ABI 10: the values too, into a buffer grown to the size kir_jit_key says it needs.
        std::vector<kir_jit_value> slots(values ? jit_args.size() : 0);
        std::vector<unsigned char> buffer(values ? 256 : 0);
        size_t needed = 0;
        if (values) {
          in.values = slots.data();
          in.value_bytes = buffer.data();
          in.value_bytes_capacity = buffer.size();
          in.value_bytes_size = &needed;
        }
        kir_hash128 out;
        int rc = kir_jit_key(&in, &out);
        if (rc != 0 && values && needed > buffer.size()) {  // refused before reading anything: once more
          buffer.resize(needed);
          in.value_bytes = buffer.data();
          in.value_bytes_capacity = buffer.size();
          rc = kir_jit_key(&in, &out);
        }
        if (rc != 0)
          raise(kir::Error(kir::ErrorCode(kir_last_error_code()), kir_last_error(), kir_last_error_offset()));
        std::string key = kir::Hash128{out.high, out.low}.hex();
        if (!values) return nb::cast(key);
        nb::list decoded;
        for (const kir_jit_value& v : slots)
          decoded.append(nb::make_tuple(v.position, v.kind, v.type, bool(v.from_memory), v.count,
                                        nb::bytes(static_cast<const char*>(v.bytes), size_t(v.size))));
        return nb::make_tuple(key, decoded);
      },
      "static_hash"_a, "arch"_a, "params"_a, "jit_args"_a, "memory"_a, "grid"_a, "block"_a, "specialize_grid"_a,
      "specialize_block"_a, "shared_bytes"_a, "bounds"_a, "config"_a, "captures"_a, "param_sizes"_a = nb::none(),
      "values"_a = false,
      "The JIT key through kir_jit_key (the C API): each runtime-constant argument, kir_jit_arg's "
      "fields (position, kind, type, by_value, count, count_type, count_position), read from `params` (the launch's "
      "argument bytes) and, by pointer, from `memory` ({address: bytes}); KirError with "
      "kir_last_error() when kir_jit_key fails. With `values`: (key, [(position, kind, type, from_memory, count, "
      "value bytes)]), the values it hashed (kir_jit_key_input.values, ABI 10).");
  m.def(
      "launch_identity_of",
      [](const kir::Hash128& static_hash, const std::string& arch, const std::vector<std::optional<nb::bytes>>& params,
         std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block, uint64_t shared_bytes) {
        std::vector<void*> args;
        std::vector<uint32_t> sizes;
        for (const std::optional<nb::bytes>& b : params) {
          args.push_back(b ? const_cast<char*>(b->c_str()) : nullptr);
          sizes.push_back(b ? uint32_t(b->size()) : 0);
        }
        kir_hash128 h =
            kir_launch_identity({static_hash.high, static_hash.low}, arch.c_str(), args.data(), sizes.data(),
                                uint32_t(params.size()), grid.data(), block.data(), shared_bytes);
        return kir::Hash128{h.high, h.low}.hex();
      },
      "static_hash"_a, "arch"_a, "params"_a, "grid"_a, "block"_a, "shared_bytes"_a,
      "The launch identity through kir_launch_identity (the C API): every parameter's bytes "
      "(None: left out), grid, block, dynamic shared memory.");
}

}  // namespace

namespace kir_bindings {

void raise_kir_error(const kir::Error& e) {
  auto code = static_cast<uint32_t>(e.code());
  nb::handle type = kir_error_types[code < kir::kErrorCodes ? code : uint32_t(kir::ErrorCode::internal)];
  nb::object error = type(e.message());
  if (std::optional<uint64_t> offset = e.offset()) error.attr("offset") = *offset;
  PyErr_SetObject(type.ptr(), error.ptr());
  throw nb::python_error();
}

}  // namespace kir_bindings

NB_MODULE(_core, m) {
  m.doc() = "kir core bindings (libkir)";
  m.attr("__version__") = kir_version();
  // `kir --version`: the C ABI (libkir.so's SONAME major, CMake SOVERSION) and the hook API.
  m.attr("abi_version") = KIR_VERSION_MAJOR;
  m.attr("hook_api_version") = KIR_HOOK_API_VERSION;
  // docs/abi.md: the running libkir's ABI versions (kir.h, cache.h), and the ones it was built with.
  m.attr("c_abi_version") = kir_abi_version();
  m.attr("cache_abi_version") = kir_cache_abi_version();
  m.attr("C_ABI_VERSION") = KIR_ABI_VERSION;
  m.attr("CACHE_ABI_VERSION") = KIR_CACHE_ABI_VERSION;
  // The error codes by name (kir/support/error.hpp): kir.errors.ErrorCode must agree.
  nb::module_ errors = nb::module_::import_("kir.errors");
  nb::object by_code = errors.attr("error_class");
  nb::object enum_type = errors.attr("ErrorCode");
  nb::dict codes;
  for (uint32_t c = 0; c < kir::kErrorCodes; ++c) {
    const char* name = kir::error_code_name(kir::ErrorCode(c));
    codes[name] = c;
    std::string upper(name);
    for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (!nb::hasattr(enum_type, upper.c_str()) || nb::cast<uint32_t>(enum_type.attr(upper.c_str())) != c)
      throw std::runtime_error(std::string("kir.errors.ErrorCode disagrees with libkir on ") + upper);
    kir_error_types[c] = by_code(c).inc_ref().ptr();
  }
  m.attr("error_codes") = codes;
  bind_model(m);
  bind_device_code(m);
  bind_fatbin(m);
  bind_binary(m);
  bind_elf(m);
  bind_hash(m);
  kir_bindings::bind_recording(m);
  kir_bindings::bind_cache(m);
}
