// parse_cubin: kernels, functions and globals of a CUDA ELF.
#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "kir/cuda/cubin.hpp"
#include "kir/object/elf.hpp"
#include "kir/support/demangle.hpp"

namespace kir {

namespace {

namespace eiattr {
constexpr uint8_t kMaxThreads = 0x05;
constexpr uint8_t kReqNtid = 0x10;
constexpr uint8_t kFrameSize = 0x11;
constexpr uint8_t kKparamInfo = 0x17;
constexpr uint8_t kCbankParamSize = 0x19;
constexpr uint8_t kRegCount = 0x2f;
constexpr uint8_t kCtaPerCluster = 0x3d;
}  // namespace eiattr

constexpr uint8_t kCudaObjectType = 13;                          // STT_LOPROC: __constant__ and similar
constexpr std::string_view kJitBitcodePrefix = "_jit_bitcode_";  // Proteus (formats.md §5)

/// Call `fn(attribute, format, value)` for every EIATTR record of `info`.
template <class Fn>
Status for_each_attribute(const ElfSection& info, Fn&& fn) {
  ByteView d = info.data;
  uint64_t off = 0;
  while (off < d.size()) {
    if (!d.contains(off, 4))
      return Error(ErrorCode::truncated,
                   "section '" + std::string(info.name) + "': attribute record at offset " + hex(off) + " is truncated",
                   d.origin(off));
    uint8_t format = d.read<uint8_t>(off), attr = d.read<uint8_t>(off + 1);
    if (format == 4) {  // SVAL: u16 size, then the bytes
      uint16_t size = d.read<uint16_t>(off + 2);
      if (!d.contains(off + 4, size))
        return Error(ErrorCode::out_of_bounds,
                     "section '" + std::string(info.name) + "': attribute 0x" + hex(attr).substr(2) + " at offset " +
                         hex(off) + " claims " + std::to_string(size) + " bytes, " +
                         std::to_string(d.size() - off - 4) + " are left",
                     d.origin(off));
      fn(attr, format, d.sub(off + 4, size));
      off += 4 + uint64_t(size);
    } else if (format >= 1 && format <= 3) {
      fn(attr, format, d.sub(off + 2, 2));
      off += 4;
    } else {
      return Error(ErrorCode::malformed,
                   "section '" + std::string(info.name) + "': unknown attribute format " + std::to_string(format) +
                       " at offset " + hex(off),
                   d.origin(off));
    }
  }
  return {};
}

std::array<uint32_t, 3> read_dim3(ByteView v) {
  return {v.read<uint32_t>(0), v.read<uint32_t>(4), v.read<uint32_t>(8)};
}

/// Fill `k` from the records of `.nv.info.<kernel>`.
Status read_kernel_info(const ElfSection& info, Kernel& k) {
  return for_each_attribute(info, [&](uint8_t attr, uint8_t format, ByteView v) {
    if (attr == eiattr::kKparamInfo && v.size() >= 12) {
      uint32_t bits = v.read<uint32_t>(8);
      k.params.push_back({v.read<uint16_t>(4), v.read<uint16_t>(6), bits >> 18});
    } else if (attr == eiattr::kCbankParamSize && format == 3) {
      k.param_bytes = v.read<uint16_t>(0);
    } else if (attr == eiattr::kMaxThreads && v.size() >= 12) {
      k.max_threads = read_dim3(v);
    } else if (attr == eiattr::kReqNtid && v.size() >= 12) {
      k.required_threads = read_dim3(v);
    } else if (attr == eiattr::kCtaPerCluster && v.size() >= 12) {
      k.cluster_dims = read_dim3(v);
    }
  });
}

struct PerSymbol {
  std::unordered_map<uint32_t, uint32_t> registers, frame;
};

/// Registers and frame sizes from the module-wide `.nv.info`, by symbol index.
Expected<PerSymbol> read_module_info(const ElfFile& elf) {
  PerSymbol out;
  const ElfSection* info = elf.section_by_name(".nv.info");
  if (!info) return out;
  Status s = for_each_attribute(*info, [&](uint8_t attr, uint8_t, ByteView v) {
    if (v.size() < 8) return;
    if (attr == eiattr::kRegCount) out.registers[v.read<uint32_t>(0)] = v.read<uint32_t>(4);
    if (attr == eiattr::kFrameSize) out.frame[v.read<uint32_t>(0)] = v.read<uint32_t>(4);
  });
  if (!s) return s.error();
  return out;
}

bool is_global_section(std::string_view name) {
  return name.rfind(".nv.global", 0) == 0 ||
         (name.rfind(".nv.constant", 0) == 0 && name.rfind(".nv.constant0", 0) != 0);
}

}  // namespace

Expected<DeviceCode> parse_cubin(ByteView cubin) {
  Expected<ElfFile> elf = ElfFile::create(cubin);
  if (!elf) return elf.error().within("cubin");
  if (elf->machine() != elf::EM_CUDA)
    return Error(ErrorCode::bad_magic,
                 "cubin: e_machine is " + std::to_string(elf->machine()) + ", expected 190 (EM_CUDA)");
  DeviceCode code;
  code.kind = ImageKind::cubin;
  const ElfSection* symtab = elf->symbol_table();
  if (!symtab) return code;
  Expected<std::vector<ElfSymbol>> symbols = elf->symbols(*symtab);
  if (!symbols) return symbols.error().within("cubin");
  Expected<PerSymbol> module = read_module_info(*elf);
  if (!module) return module.error().within("cubin");

  std::unordered_map<std::string_view, const ElfSection*> by_name;
  for (const ElfSection& s : elf->sections()) by_name.emplace(s.name, &s);
  auto find = [&](const char* prefix, std::string_view name) -> const ElfSection* {
    auto it = by_name.find(std::string(prefix) + std::string(name));
    return it == by_name.end() ? nullptr : it->second;
  };
  const auto& sections = elf->sections();

  for (const ElfSymbol& sym : *symbols) {
    if (sym.section == elf::SHN_UNDEF || sym.section >= sections.size() || sym.name.empty()) continue;
    if (sym.type == elf::STT_FUNC) {
      if (!find(".nv.constant0.", sym.name)) {
        code.functions.emplace_back(sym.name);
        continue;
      }
      Kernel k;
      k.name = std::string(sym.name);
      k.demangled = demangle(k.name);
      k.code_bytes = sym.size;
      if (const ElfSection* info = find(".nv.info.", sym.name))
        if (Status s = read_kernel_info(*info, k); !s) return s.error().within("cubin");
      std::sort(k.params.begin(), k.params.end(),
                [](const KernelParam& a, const KernelParam& b) { return a.ordinal < b.ordinal; });
      if (!k.param_bytes && k.params.empty()) k.param_bytes = 0;  // no parameters recorded
      if (auto it = module->registers.find(sym.index); it != module->registers.end()) k.registers = it->second;
      if (auto it = module->frame.find(sym.index); it != module->frame.end()) k.frame_bytes = it->second;
      const ElfSection* shared = find(".nv.shared.", sym.name);
      k.shared_bytes = shared ? shared->size : 0;
      code.kernels.push_back(std::move(k));
    } else if (sym.type == elf::STT_OBJECT && sym.name.rfind(kJitBitcodePrefix, 0) == 0 &&
               sections[sym.section].name == ".nv.global.init") {
      // Proteus: the translation unit's device module, as a byte array.
      const ElfSection& init = sections[sym.section];
      if (!init.data.contains(sym.value, sym.size))
        return Error(ErrorCode::out_of_bounds,
                     "cubin: symbol '" + std::string(sym.name) + "' (offset " + hex(sym.value) + ", size " +
                         hex(sym.size) + ") runs past the end of .nv.global.init (size " + hex(init.size) + ")");
      EmbeddedModule m;
      m.name = std::string(sym.name);
      ByteView bytes = init.data.sub(sym.value, sym.size);
      m.bitcode.assign(bytes.data(), bytes.data() + bytes.size());
      m.digest = xxh3_128(bytes);
      code.ir.push_back(std::move(m));
    } else if ((sym.type == elf::STT_OBJECT || sym.type == kCudaObjectType) && sym.name[0] != '.' &&
               is_global_section(sections[sym.section].name)) {
      code.globals.push_back({std::string(sym.name), std::string(sections[sym.section].name), sym.size});
    }
  }
  return code;
}

}  // namespace kir
