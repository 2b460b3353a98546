// Discoverer: CUDA fatbin containers (magic 0xBA55ED50) and the
// `__fatBinC_Wrapper_t` wrappers that point to them — in a file's sections
// (`.nvFatBinSegment`, `.hipFatBinSegment`) or handed to
// __cudaRegisterFatBinary at run time.
#include "kir/discover.hpp"

#include <algorithm>

#include "kir/object/elf.hpp"
#include "wrapper.hpp"

namespace kir {

namespace {

/// A CUDA fatbin entry as an Image.
Image image_from_fatbin(const FatbinEntry& e) {
  Image image;
  image.index = e.index;
  image.kind = fatbin_image_kind(e.kind);
  image.target = "sm_" + std::to_string(e.arch);
  image.triple = "nvptx64-nvidia-cuda";
  image.id = e.identifier;
  image.compression = e.compression();
  image.stored = e.payload;
  image.file_offset = e.payload.origin();
  image.size = e.image_size();
  image.fatbin = e;
  return image;
}

ContainerSite site_of(const FatbinContainer& c) {
  ContainerSite site;
  site.file_offset = c.bytes().origin();
  site.format = ContainerFormat::cuda_fatbin;
  site.version = c.version();
  site.size = c.total_size();
  for (const FatbinEntry& e : c.entries()) site.images.push_back(image_from_fatbin(e));
  return site;
}

}  // namespace

Expected<ContainerSite> discover_fatbin(ByteView at, DiscoverOptions options) {
  Expected<FatbinContainer> c = FatbinContainer::create(at, {/*known_kinds_only=*/options.strict});
  if (!c) return c.error();
  return site_of(*c);
}

namespace discover {

Expected<WrapperFields> read_wrapper(ByteView w, uint32_t magic) {
  if (w.size() < kWrapperSize)
    return Error(ErrorCode::truncated,
                 "wrapper: " + std::to_string(w.size()) + " bytes, expected " + std::to_string(kWrapperSize));
  WrapperFields f;
  f.magic = w.read<uint32_t>(0);
  if (f.magic != magic) return Error(ErrorCode::bad_magic, "expected magic " + hex(magic) + ", found " + hex(f.magic));
  f.version = w.read<uint32_t>(4);
  f.data = w.read<uint64_t>(8);
  f.prelinked = w.read<uint64_t>(16);
  return f;
}

namespace {

Status load_relocations(const ElfFile& elf, const ElfSection& seg, std::vector<ElfRelocation>& relocs,
                        std::vector<ElfSymbol>& symbols) {
  const ElfSection* rela = elf.relocations_for(seg.index);
  if (!rela) return {};
  Expected<std::vector<ElfRelocation>> r = elf.relocations(*rela);
  if (!r) return r.error();
  relocs = std::move(*r);
  if (rela->link >= elf.sections().size())
    return Error(ErrorCode::malformed,
                 "relocation section links to missing symbol table [index " + std::to_string(rela->link) + "]");
  Expected<std::vector<ElfSymbol>> s = elf.symbols(elf.sections()[rela->link]);
  if (!s) return s.error();
  symbols = std::move(*s);
  return {};
}

/// File offset (absolute) that the pointer at `seg_off` of `seg` refers to.
std::optional<uint64_t> resolve_pointer(const ElfFile& elf, const ElfSection& seg, uint64_t seg_off,
                                        const std::vector<ElfRelocation>& relocs,
                                        const std::vector<ElfSymbol>& symbols) {
  if (elf.type() != elf::ET_REL) {
    uint64_t vaddr = seg.data.read<uint64_t>(seg_off);
    if (vaddr == 0) return std::nullopt;
    std::optional<uint64_t> off = elf.file_offset_of(vaddr, 16);
    if (!off) return std::nullopt;
    return elf.bytes().origin(*off);
  }
  for (const ElfRelocation& r : relocs) {
    if (r.offset != seg_off || r.type != elf::R_X86_64_64 || r.symbol >= symbols.size()) continue;
    const ElfSymbol& sym = symbols[r.symbol];
    if (sym.section == elf::SHN_UNDEF || sym.section >= elf.sections().size()) return std::nullopt;
    const ElfSection& target = elf.sections()[sym.section];
    uint64_t in_section = sym.value + static_cast<uint64_t>(r.addend);
    if (!target.data.contains(in_section, 16)) return std::nullopt;
    return target.data.origin(in_section);
  }
  return std::nullopt;
}

/// v2 wrappers: a NULL-terminated array of pointers to prelinked fatbins.
std::vector<uint64_t> read_prelinked(const ElfFile& elf, uint64_t array_vaddr) {
  constexpr uint64_t kMaxPrelinked = 1 << 16;
  std::vector<uint64_t> out;
  if (array_vaddr == 0 || elf.type() == elf::ET_REL) return out;
  for (uint64_t i = 0; i < kMaxPrelinked; ++i) {
    std::optional<uint64_t> slot = elf.file_offset_of(array_vaddr + 8 * i, 8);
    if (!slot) break;
    uint64_t ptr = elf.bytes().read<uint64_t>(*slot);
    if (ptr == 0) break;
    if (std::optional<uint64_t> off = elf.file_offset_of(ptr, 16)) out.push_back(elf.bytes().origin(*off));
  }
  return out;
}

}  // namespace

Status read_wrappers(const ElfFile& elf, const ElfSection& seg, const std::string& member, const std::string& where,
                     const std::function<Status(FatbinWrapper&)>& each) {
  bool hip = seg.name == ".hipFatBinSegment";
  uint32_t magic = hip ? kHipWrapperMagic : kFatbinWrapperMagic;
  // A section without bytes in the file has no wrappers, whatever its header's size says.
  if (seg.type == elf::SHT_NOBITS || seg.type == elf::SHT_NULL) return {};
  std::vector<ElfRelocation> relocs;
  std::vector<ElfSymbol> symbols;
  if (elf.type() == elf::ET_REL)
    if (Status s = load_relocations(elf, seg, relocs, symbols); !s) return s.error().within(where);
  for (uint64_t off = 0; seg.data.contains(off, kWrapperSize); off += kWrapperSize) {
    ByteView w = seg.data.sub(off, kWrapperSize);
    if (w.read<uint64_t>(0) == 0) continue;  // padding
    Expected<WrapperFields> f = read_wrapper(w, magic);
    if (!f) return f.error().within(where + ": wrapper at file offset " + hex(w.origin()));
    FatbinWrapper wrapper;
    wrapper.member = member;
    wrapper.hip = hip;
    wrapper.file_offset = w.origin();
    wrapper.version = f->version;
    wrapper.container_offset = resolve_pointer(elf, seg, off + 8, relocs, symbols);
    if (!hip && wrapper.version == 2) wrapper.prelinked_offsets = read_prelinked(elf, f->prelinked);
    if (Status s = each(wrapper); !s) return s;
  }
  return {};
}

/// The bytes a registered wrapper's data pointer leads to, no more than `max_size`.
Expected<ByteView> registered_data(const void* wrapper, uint32_t magic, uint64_t max_size, ReadableExtent readable) {
  if (!wrapper) return Error(ErrorCode::invalid_argument, "wrapper is NULL");
  Expected<WrapperFields> f = read_wrapper(ByteView(static_cast<const uint8_t*>(wrapper), kWrapperSize), magic);
  std::string where = "wrapper at " + hex(reinterpret_cast<uintptr_t>(wrapper));
  if (!f) return f.error().within(where);
  if (!f->data) return Error(ErrorCode::malformed, where + ": its container pointer is NULL");
  const auto* data = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(f->data));
  return ByteView(data, readable ? std::min(max_size, readable(data)) : max_size);
}

}  // namespace discover

Expected<FatbinContainer> registered_fatbin(const void* wrapper, uint64_t max_size, ReadableExtent readable) {
  Expected<ByteView> at = discover::registered_data(wrapper, kFatbinWrapperMagic, max_size, readable);
  if (!at) return at.error();
  Expected<FatbinContainer> c = FatbinContainer::create(*at);
  if (!c) c.error().within("container at " + hex(reinterpret_cast<uintptr_t>(at->data())));
  return c;
}

Expected<ContainerSite> discover_registered_fatbin(const void* wrapper, uint64_t max_size, ReadableExtent readable) {
  Expected<FatbinContainer> c = registered_fatbin(wrapper, max_size, readable);
  if (!c) return c.error();
  ContainerSite site = site_of(*c);
  site.found_by = FoundBy::wrapper;
  return site;
}

}  // namespace kir
