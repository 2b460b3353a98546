// parse_code_object: kernels, target, device variables and embedded IR of an
// AMDGPU code object.
//
// Every metadata note (owner "AMDGPU", type 32 NT_AMDGPU_METADATA; an LTO-partitioned
// link has one per partition, each listing its kernels) is a
// MessagePack map: "amdhsa.target" (the target id) and "amdhsa.kernels", one
// map per kernel with ".name", ".args" (".offset", ".size", ".value_kind";
// kinds starting with "hidden_" are the runtime's implicit arguments),
// ".kernarg_segment_size", ".group_segment_fixed_size" (LDS),
// ".private_segment_fixed_size" (scratch), ".vgpr_count", ".max_flat_workgroup_size".
// Without a note, kernels come from their 64-byte `<name>.kd` descriptors
// (u32 group segment size at 0, private segment size at 4, kernarg size at 8).
#include "kir/amdgpu/code_object.hpp"
#include "kir/object/elf.hpp"
#include "kir/support/demangle.hpp"
#include "kir/support/msgpack.hpp"

namespace kir {

namespace {

constexpr uint32_t kNtAmdgpuMetadata = 32;
constexpr std::string_view kJitBitcodePrefix = ".jit.bitcode.";

int64_t int_field(const MsgpackValue& map, std::string_view key, int64_t fallback = -1) {
  const MsgpackValue* v = map.get(key);
  return v && v->type == MsgpackValue::Type::integer ? v->integer : fallback;
}

Kernel kernel_from_metadata(const MsgpackValue& k) {
  Kernel kernel;
  if (const MsgpackValue* name = k.get(".name")) kernel.name = std::string(name->string);
  kernel.demangled = demangle(kernel.name);
  uint32_t ordinal = 0, end = 0;
  if (const MsgpackValue* args = k.get(".args"); args && args->type == MsgpackValue::Type::array) {
    for (const MsgpackValue& arg : args->items) {
      const MsgpackValue* kind = arg.get(".value_kind");
      if (kind && kind->string.rfind("hidden_", 0) == 0) continue;
      uint32_t offset = uint32_t(int_field(arg, ".offset", 0)), size = uint32_t(int_field(arg, ".size", 0));
      kernel.params.push_back({ordinal++, offset, size});
      end = std::max(end, offset + size);
    }
  }
  kernel.param_bytes = end;
  if (int64_t v = int_field(k, ".vgpr_count"); v >= 0) kernel.registers = uint32_t(v);
  if (int64_t v = int_field(k, ".group_segment_fixed_size"); v >= 0) kernel.shared_bytes = uint64_t(v);
  if (int64_t v = int_field(k, ".private_segment_fixed_size"); v >= 0) kernel.frame_bytes = uint32_t(v);
  if (int64_t v = int_field(k, ".max_flat_workgroup_size"); v > 0)
    kernel.max_threads = std::array<uint32_t, 3>{uint32_t(v), 1, 1};
  return kernel;
}

/// The payloads of every metadata note, in file order. A code object linked
/// with LTO partitions (clang HIP -fgpu-rdc: 8 by default) carries one note per
/// partition, each listing that partition's kernels.
std::vector<ByteView> metadata_notes(const ElfFile& elf) {
  std::vector<ByteView> notes;
  for (const ElfSection& s : elf.sections()) {
    if (s.type != 7 /* SHT_NOTE */) continue;
    ByteView d = s.data;
    for (uint64_t off = 0; d.contains(off, 12);) {
      uint32_t namesz = d.read<uint32_t>(off), descsz = d.read<uint32_t>(off + 4);
      uint32_t type = d.read<uint32_t>(off + 8);
      uint64_t name = off + 12, desc = name + align_up(namesz, 4);
      if (!d.contains(name, namesz) || !d.contains(desc, descsz)) break;
      if (type == kNtAmdgpuMetadata && d.sub(name, namesz).c_string(0) == "AMDGPU")
        notes.push_back(d.sub(desc, descsz));
      off = desc + align_up(descsz, 4);
    }
  }
  return notes;
}

Status read_metadata(ByteView note, size_t index, DeviceCode& code) {
  Expected<MsgpackValue> meta = parse_msgpack(note);
  if (!meta) return meta.error().within("AMDGPU metadata note" + (index ? " #" + std::to_string(index) : ""));
  if (const MsgpackValue* target = meta->get("amdhsa.target"); target && code.target.empty())
    code.target = std::string(target->string);
  if (const MsgpackValue* kernels = meta->get("amdhsa.kernels"); kernels && kernels->type == MsgpackValue::Type::array)
    for (const MsgpackValue& k : kernels->items) code.kernels.push_back(kernel_from_metadata(k));
  return {};
}

/// Kernels from `.kd` descriptor symbols (code objects without a metadata note).
Status read_descriptors(const ElfFile& elf, DeviceCode& code) {
  const ElfSection* symtab = elf.symbol_table();
  if (!symtab) return {};
  Expected<std::vector<ElfSymbol>> symbols = elf.symbols(*symtab);
  if (!symbols) return symbols.error();
  for (const ElfSymbol& sym : *symbols) {
    if (sym.name.size() <= 3 || sym.name.substr(sym.name.size() - 3) != ".kd") continue;
    Kernel k;
    k.name = std::string(sym.name.substr(0, sym.name.size() - 3));
    k.demangled = demangle(k.name);
    if (sym.section < elf.sections().size()) {
      const ElfSection& s = elf.sections()[sym.section];
      uint64_t at = sym.value - s.addr;
      if (sym.value >= s.addr && s.data.contains(at, 12)) {
        k.shared_bytes = s.data.read<uint32_t>(at);
        k.frame_bytes = s.data.read<uint32_t>(at + 4);
        k.param_bytes = s.data.read<uint32_t>(at + 8);
      }
    }
    code.kernels.push_back(std::move(k));
  }
  return {};
}

/// The device variables: defined global or weak objects of the symbol table (what
/// hipModuleGetGlobal finds by name: ROCm/clr hipamd/src/hip_module.cpp,
/// hipModuleGetGlobal -> the code object's global symbols), less the kernels'
/// descriptors (`NAME.kd`, objects too). Their section is the ELF section holding them.
Status read_globals(const ElfFile& elf, DeviceCode& code) {
  constexpr uint8_t kGlobal = 1, kWeak = 2;  // STB_GLOBAL, STB_WEAK
  const ElfSection* symtab = elf.symbol_table();
  if (!symtab) return {};
  Expected<std::vector<ElfSymbol>> symbols = elf.symbols(*symtab);
  if (!symbols) return symbols.error();
  for (const ElfSymbol& sym : *symbols) {
    if (sym.type != elf::STT_OBJECT || (sym.binding != kGlobal && sym.binding != kWeak) || sym.name.empty() ||
        sym.section == elf::SHN_UNDEF || sym.section >= elf.sections().size())
      continue;
    if (sym.name.size() > 3 && sym.name.substr(sym.name.size() - 3) == ".kd") continue;
    code.globals.push_back({std::string(sym.name), std::string(elf.sections()[sym.section].name), sym.size});
  }
  return {};
}

/// ".jit.bitcode.<kernel|tu|lto...>.<md5hex>.<decimal>" into its fields.
EmbeddedModule jit_section(const ElfSection& s) {
  EmbeddedModule m;
  m.name = std::string(s.name);
  std::string_view rest = s.name.substr(kJitBitcodePrefix.size());
  size_t last = rest.rfind('.');
  size_t mid = last == std::string_view::npos ? last : rest.rfind('.', last - 1);
  if (mid != std::string_view::npos) {
    m.md5 = std::string(rest.substr(mid + 1, last - mid - 1));
    m.hash = std::string(rest.substr(last + 1));
    std::string_view what = rest.substr(0, mid);
    if (what != "tu" && what.rfind("lto", 0) != 0) m.kernel = std::string(what);
  }
  m.bitcode.assign(s.data.data(), s.data.data() + s.data.size());
  m.digest = xxh3_128(s.data);
  return m;
}

}  // namespace

Expected<DeviceCode> parse_code_object(ByteView bytes) {
  Expected<ElfFile> elf = ElfFile::create(bytes);
  if (!elf) return elf.error().within("code object");
  if (elf->machine() != elf::EM_AMDGPU)
    return Error(ErrorCode::bad_magic,
                 "code object: e_machine is " + std::to_string(elf->machine()) + ", expected 224 (EM_AMDGPU)");
  DeviceCode code;
  code.kind = ImageKind::code_object;
  std::vector<ByteView> notes = metadata_notes(*elf);
  for (size_t i = 0; i < notes.size(); ++i) {
    Status s = read_metadata(notes[i], i, code);
    if (!s) return s.error().within("code object");
  }
  if (notes.empty()) {
    Status s = read_descriptors(*elf, code);
    if (!s) return s.error().within("code object");
  }
  if (Status s = read_globals(*elf, code); !s) return s.error().within("code object");
  for (const ElfSection& sec : elf->sections())
    if (sec.name.rfind(kJitBitcodePrefix, 0) == 0 && sec.type != elf::SHT_NOBITS) code.ir.push_back(jit_section(sec));
  return code;
}

}  // namespace kir
