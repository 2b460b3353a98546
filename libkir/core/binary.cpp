#include "kir/binary.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "kir/amdgpu/code_object.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/llvm/bitcode.hpp"
#include "kir/object/archive.hpp"
#include "kir/object/elf.hpp"

namespace kir {

namespace {

constexpr const char* kFatbinSections[] = {".nv_fatbin", "__nv_relfatbin"};
constexpr const char* kBundleSection = ".hip_fatbin";
constexpr const char* kWrapperSections[] = {".nvFatBinSegment", ".hipFatBinSegment"};
constexpr uint64_t kWrapperSize = 24;
constexpr uint32_t kOffloadingSectionType = 0x6fff4c0b;  // SHT_LLVM_OFFLOADING
constexpr uint32_t kLtoSectionType = 0x6fff4c0c;         // SHT_LLVM_LTO (-ffat-lto-objects)
constexpr uint64_t kMaxPrelinked = 1 << 16;

std::string member_prefix(const std::string& member) {
  return member.empty() ? std::string() : "member '" + member + "': ";
}

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

/// What an ELF image is, by its machine.
ImageKind classify_elf(ByteView data) {
  if (!ElfFile::is_elf(data) || data.size() < 20) return ImageKind::unknown;
  uint16_t machine = data.read<uint16_t>(18);
  return machine == elf::EM_AMDGPU ? ImageKind::code_object
         : machine == elf::EM_CUDA ? ImageKind::cubin
                                   : ImageKind::object;
}

/// A cubin's "sm_NN" from its e_flags: bits 8-15 from ELF ABI version 8 on
/// (CUDA 12.8+), bits 0-7 before.
std::string cubin_target(ByteView elf) {
  if (elf.size() < 0x34) return "";  // a truncated header: parse_cubin says what is wrong
  uint8_t abi_version = elf.read<uint8_t>(8);
  uint32_t flags = elf.read<uint32_t>(0x30);
  uint32_t sm = abi_version >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
  return "sm_" + std::to_string(sm);
}

/// What a bundle entry's bytes are, from their magic.
ImageKind classify_entry(const BundleId& id, ByteView data) {
  if (id.host()) return ImageKind::host;
  if (is_bitcode(data)) return ImageKind::bitcode;
  if (ElfFile::is_elf(data)) return classify_elf(data);
  return data.empty() ? ImageKind::empty : ImageKind::unknown;
}

/// An offloading binary's entry as an Image.
Image image_from_offload_entry(const OffloadBinaryEntry& e, uint32_t index, bool in_file) {
  Image image;
  image.index = index;
  ImageKind kind = offload_image_kind(e.image_kind);
  image.kind = kind == ImageKind::object ? classify_elf(e.image) : kind;
  image.target = e.string("arch");
  image.triple = e.string("triple");
  image.id = offload_kind_name(e.offload_kind);
  image.stored = e.image;
  if (in_file) image.file_offset = e.image.origin();
  image.size = e.image.size();
  image.strings = e.strings;
  return image;
}

/// An offload bundle's entry as an Image; `in_file` when its bytes are the file's.
Image image_from_bundle(const BundleEntry& e, uint32_t index, bool in_file) {
  Image image;
  BundleId id = parse_bundle_id(e.id);
  image.index = index;
  image.kind = classify_entry(id, e.data);
  image.target = id.target;
  image.triple = id.triple;
  image.id = e.id;
  image.stored = e.data;
  if (in_file) image.file_offset = e.data.origin();
  image.size = e.data.size();
  return image;
}

}  // namespace

const char* container_format_name(ContainerFormat format) {
  switch (format) {
    case ContainerFormat::cuda_fatbin: return "cuda-fatbin";
    case ContainerFormat::offload_bundle: return "offload-bundle";
    case ContainerFormat::object_bundle: return "object-bundle";
    case ContainerFormat::offload_binary: return "offload-binary";
    case ContainerFormat::device_elf: return "device-elf";
    default: return "bitcode-section";
  }
}

Expected<ByteView> decode_image(const Image& image, Scratch& scratch) {
  if (image.fatbin) return decode_image(*image.fatbin, scratch);
  return image.stored;
}

const char* found_by_name(FoundBy how) {
  switch (how) {
    case FoundBy::section: return "section";
    case FoundBy::wrapper: return "wrapper";
    default: return "scan";
  }
}

/// Fills a Binary from one file: the per-object discovery steps.
class BinaryReader {
 public:
  BinaryReader(Binary& out, BinaryOptions options) : out_(out), options_(options) {}

  Status read_file(ByteView bytes) {
    if (Archive::is_archive(bytes)) return read_archive(bytes);
    if (FatbinContainer::has_magic(bytes)) {
      out_.format_ = "fatbin";
      return walk_containers(bytes, "", "");
    }
    if (OffloadBundle::has_magic(bytes) || CompressedBundle::has_magic(bytes)) {
      out_.format_ = "offload-bundle";
      return walk_bundles(bytes, "", "");
    }
    if (OffloadBinary::has_magic(bytes)) {
      out_.format_ = "offload-binary";
      return walk_offload_binaries(bytes, "", "");
    }
    if (!ElfFile::is_elf(bytes)) return Error(not_recognized(bytes));
    ImageKind kind = classify_elf(bytes);
    bool device = kind == ImageKind::cubin || kind == ImageKind::code_object;
    if (device && ElfFile::create(bytes)) {  // a cubin or code object file: one device image
      out_.format_ = name(kind);
      add_device_elf(bytes, kind);
      return {};
    }
    out_.format_ = "elf";
    return read_object(bytes, "");
  }

 private:
  static std::string not_recognized(ByteView bytes) {
    if (bytes.empty()) return "empty file: not an ELF file, ar archive, fatbin or offload bundle";
    std::string head;
    for (uint64_t i = 0; i < std::min<uint64_t>(4, bytes.size()); ++i)
      head += (i ? " " : "") + hex(bytes.data()[i]).substr(2);
    return "not an ELF file, ar archive, fatbin or offload bundle (first bytes: " + head + ")";
  }

  Status read_archive(ByteView bytes) {
    out_.format_ = "archive";
    Expected<Archive> archive = Archive::create(bytes);
    if (!archive) return archive.error();
    for (const ArchiveMember& m : archive->members()) {
      out_.members_.push_back(m.name);
      if (!ElfFile::is_elf(m.data)) continue;  // e.g. a text file in the archive
      if (Status s = read_object(m.data, m.name); !s) return s;
    }
    return {};
  }

  Status read_object(ByteView bytes, const std::string& member) {
    Expected<ElfFile> elf = ElfFile::create(bytes);
    if (!elf) return elf.error().within(member_prefix(member) + "ELF");
    for (const ElfSection& s : elf->sections()) {
      if (s.type == elf::SHT_NOBITS) continue;
      Status st;
      for (const char* name : kFatbinSections)
        if (s.name == name) st = walk_containers(s.data, member, name);
      if (st && s.name == kBundleSection) st = walk_bundles(s.data, member, kBundleSection);
      if (st && (s.type == kOffloadingSectionType || s.name == ".llvm.offloading"))
        st = walk_offload_binaries(s.data, member, std::string(s.name));
      if (st && (s.name == ".llvmbc" || s.name == ".llvm.lto" || s.type == kLtoSectionType))
        st = read_bitcode_section(*elf, s, member);
      if (!st) return st;
    }
    read_object_bundle(*elf, member);
    for (const char* section : kWrapperSections)
      if (Status st = read_wrappers(*elf, member, section); !st) return st;
    if (options_.scan) {
      scan_sections(*elf, member);
      scan_bitcode(*elf, member);
    }
    return {};
  }

  /// Items back to back in `bytes`, each 8-aligned, zero padding between:
  /// `read(at)` parses and adds the one at `at` and returns its size.
  template <class Read>
  Status walk_aligned(ByteView bytes, Read&& read) {
    uint64_t off = 0, released = 0;
    while (off < bytes.size()) {
      ByteView at = bytes.from(off);
      if (is_zero_padding(at)) {
        off += std::min<uint64_t>(8, at.size());
        continue;
      }
      Expected<uint64_t> size = read(at);
      if (!size) return size.error();
      off = std::min(align_up(off + *size, 8), bytes.size());
      release(bytes, released, off);
    }
    release(bytes, released, off, true);
    return {};
  }

  /// Fatbin containers back to back in `bytes`.
  Status walk_containers(ByteView bytes, const std::string& member, const std::string& section) {
    return walk_aligned(bytes, [&](ByteView at) -> Expected<uint64_t> {
      Expected<FatbinContainer> c = FatbinContainer::create(at);
      if (!c)
        return c.error().within(member_prefix(member) + section + ": container #" +
                                std::to_string(out_.containers_.size()) + " at file offset " +
                                hex(at.origin()));
      add_fatbin(member, section, at.origin(), FoundBy::section, *c);
      return c->total_size();
    });
  }

  /// Offload bundles (plain or compressed) in `bytes`, found by their magic.
  Status walk_bundles(ByteView bytes, const std::string& member, const std::string& section) {
    uint64_t off = 0;
    while (off < bytes.size()) {
      uint64_t next = find_bundle(bytes, off);
      if (next >= bytes.size()) break;
      Expected<uint64_t> size = read_bundle(bytes.from(next), member, section, FoundBy::section);
      if (!size)
        return size.error().within(member_prefix(member) + section + ": bundle at file offset " +
                                   hex(bytes.origin(next)));
      off = next + std::max<uint64_t>(*size, 1);
    }
    return {};
  }

  /// Offset of the next bundle magic (plain or CCOB) at or after `off`, or bytes.size().
  static uint64_t find_bundle(ByteView bytes, uint64_t off) {
    uint64_t best = bytes.size();
    if (off >= bytes.size()) return best;
    for (std::string_view magic : {kOffloadBundleMagic, kCompressedBundleMagic}) {
      const void* hit = memmem(bytes.data() + off, bytes.size() - off, magic.data(), magic.size());
      if (hit) best = std::min<uint64_t>(best, static_cast<const uint8_t*>(hit) - bytes.data());
    }
    return best;
  }

  /// LLVM offloading binaries back to back in `bytes`.
  Status walk_offload_binaries(ByteView bytes, const std::string& member, const std::string& section) {
    return walk_aligned(bytes, [&](ByteView at) -> Expected<uint64_t> {
      Expected<OffloadBinary> b = OffloadBinary::create(at);
      if (!b)
        return b.error().within(member_prefix(member) + section +
                                ": offloading binary at file offset " + hex(at.origin()));
      ContainerSite site =
          site_for(member, section, at.origin(), FoundBy::section, ContainerFormat::offload_binary);
      site.version = b->version();
      site.size = b->total_size();
      site.inflated = b->inflated();
      if (b->compressed()) site.compression = "compressed";
      for (const OffloadBinaryEntry& e : b->entries())
        site.images.push_back(
            image_from_offload_entry(e, uint32_t(site.images.size()), !b->compressed()));
      add(std::move(site));
      return b->total_size();
    });
  }

  /// `.llvmbc` (-fembed-bitcode, with its cc1 command line in `.llvmcmd`) or
  /// `.llvm.lto` (-ffat-lto-objects): one or more bitcode modules.
  Status read_bitcode_section(const ElfFile& elf, const ElfSection& s, const std::string& member) {
    Expected<std::vector<ByteView>> modules = split_bitcode(s.data);
    if (!modules) return modules.error().within(member_prefix(member) + std::string(s.name));
    ContainerSite site = site_for(member, std::string(s.name), s.data.origin(), FoundBy::section,
                                  ContainerFormat::bitcode_section);
    site.size = s.size;
    std::string command;
    if (const ElfSection* cmd = s.name == ".llvmbc" ? elf.section_by_name(".llvmcmd") : nullptr)
      for (uint64_t i = 0; i < cmd->data.size(); i += cmd->data.c_string(i).size() + 1)
        command += (command.empty() ? "" : " ") + std::string(cmd->data.c_string(i));
    for (ByteView module : *modules) {
      Image image;
      image.index = uint32_t(site.images.size());
      image.kind = ImageKind::bitcode;
      image.stored = module;
      image.file_offset = module.origin();
      image.size = module.size();
      if (!command.empty()) image.strings.emplace_back("command", command);
      site.images.push_back(std::move(image));
    }
    add(std::move(site));
    return {};
  }

  /// Parse the (compressed) bundle at `at` and add it; its size in the file.
  Expected<uint64_t> read_bundle(ByteView at, const std::string& member, const std::string& section,
                                 FoundBy how) {
    ContainerSite site = site_for(member, section, at.origin(), how, ContainerFormat::offload_bundle);
    ByteView table = at;
    if (CompressedBundle::has_magic(at)) {
      Expected<CompressedBundle> c = CompressedBundle::create(at);
      if (!c) return c.error();
      Expected<std::vector<uint8_t>> inflated = c->decompress();
      if (!inflated) return inflated.error();
      site.inflated = std::make_shared<const std::vector<uint8_t>>(std::move(*inflated));
      site.version = c->version;
      site.size = c->total_size;
      site.compression = c->codec == BundleCodec::zstd ? "zstd" : "zlib";
      table = ByteView(site.inflated->data(), site.inflated->size());
    }
    Expected<OffloadBundle> bundle = OffloadBundle::create(table);
    if (!bundle) return bundle.error().within(site.inflated ? "decompressed bundle" : "bundle");
    if (!site.inflated) site.size = bundle->total_size();
    for (const BundleEntry& e : bundle->entries())
      site.images.push_back(image_from_bundle(e, uint32_t(site.images.size()), !site.inflated));
    uint64_t size = site.size;
    add(std::move(site));
    return size;
  }

  /// `clang-offload-bundler --type=o` output: one section per entry.
  void read_object_bundle(const ElfFile& elf, const std::string& member) {
    ContainerSite site;
    for (const ElfSection& s : elf.sections()) {
      if (s.name.rfind(kOffloadBundleMagic, 0) != 0 || s.name.size() == kOffloadBundleMagic.size())
        continue;
      if (site.images.empty())
        site = site_for(member, std::string(kOffloadBundleMagic) + "*", s.data.origin(),
                        FoundBy::section, ContainerFormat::object_bundle);
      BundleEntry e{std::string(s.name.substr(kOffloadBundleMagic.size())), 0, s.size, s.data};
      site.images.push_back(image_from_bundle(e, uint32_t(site.images.size()), true));
      site.size += s.size;
    }
    if (!site.images.empty()) add(std::move(site));
  }

  /// Drop the pages that parsed headers were read from, a window at a time
  /// (one madvise per few MiB, not per container): everything needed later is
  /// decoded, and a library can hold thousands of containers.
  static constexpr uint64_t kReleaseWindow = 8 << 20;
  void release(ByteView section, uint64_t& released, uint64_t upto, bool final = false) const {
    if (upto > released && (final || upto - released >= kReleaseWindow)) {
      out_.file_->release(section.sub(released, upto - released));
      released = upto;
    }
  }

  static bool is_zero_padding(ByteView at) {
    uint64_t n = std::min<uint64_t>(8, at.size());
    for (uint64_t i = 0; i < n; ++i)
      if (at.data()[i] != 0) return false;
    return true;
  }

  static ContainerSite site_for(const std::string& member, const std::string& section,
                                uint64_t offset, FoundBy how, ContainerFormat format) {
    ContainerSite site;
    site.member = member;
    site.section = section;
    site.file_offset = offset;
    site.found_by = how;
    site.format = format;
    return site;
  }

  void add_fatbin(const std::string& member, const std::string& section, uint64_t offset,
                  FoundBy how, const FatbinContainer& c) {
    ContainerSite site = site_for(member, section, offset, how, ContainerFormat::cuda_fatbin);
    site.version = c.version();
    site.size = c.total_size();
    for (const FatbinEntry& e : c.entries()) site.images.push_back(image_from_fatbin(e));
    add(std::move(site));
  }

  /// A file that is a device ELF: a container of one image, the whole file.
  void add_device_elf(ByteView bytes, ImageKind kind) {
    ContainerSite site = site_for("", "", 0, FoundBy::section, ContainerFormat::device_elf);
    site.size = bytes.size();
    Image image;
    image.kind = kind;
    image.stored = bytes;
    image.file_offset = 0;
    image.size = bytes.size();
    if (kind == ImageKind::cubin) {
      image.target = cubin_target(bytes);
      image.triple = "nvptx64-nvidia-cuda";
    } else if (Expected<DeviceCode> code = parse_code_object(bytes)) {
      // "amdgcn-amd-amdhsa--gfx90a:xnack+": the triple (empty environment), then the target.
      size_t split = code->target.find("--");
      if (split != std::string::npos) {
        image.triple = code->target.substr(0, split + 1);  // as bundle ids spell it: "amdgcn-amd-amdhsa-"
        image.target = code->target.substr(split + 2);
      }
    }
    site.images.push_back(std::move(image));
    add(std::move(site));
  }

  void add(ContainerSite site) {
    known_.emplace(site.file_offset, std::make_pair(site.file_offset + site.size, out_.containers_.size()));
    out_.containers_.push_back(std::move(site));
  }

  /// The known container whose bytes hold file offset `offset`, or nullptr.
  ContainerSite* container_at(uint64_t offset) {
    auto it = known_.upper_bound(offset);
    if (it == known_.begin()) return nullptr;
    --it;
    return offset < it->second.first ? &out_.containers_[it->second.second] : nullptr;
  }

  Status read_wrappers(const ElfFile& elf, const std::string& member, const char* section) {
    const ElfSection* seg = elf.section_by_name(section);
    if (!seg || seg->type == elf::SHT_NOBITS) return {};
    bool hip = std::string_view(section) == ".hipFatBinSegment";
    uint32_t magic = hip ? kHipWrapperMagic : kFatbinWrapperMagic;
    std::vector<ElfRelocation> relocs;
    std::vector<ElfSymbol> symbols;
    if (elf.type() == elf::ET_REL)
      if (Status s = load_relocations(elf, *seg, relocs, symbols); !s)
        return s.error().within(member_prefix(member) + section);
    for (uint64_t off = 0; off + kWrapperSize <= seg->size; off += kWrapperSize) {
      ByteView w = seg->data.sub(off, kWrapperSize);
      if (w.read<uint32_t>(0) != magic) {
        if (w.read<uint64_t>(0) == 0) continue;  // padding
        return Error(member_prefix(member) + section + ": wrapper at file offset " +
                     hex(w.origin()) + ": expected magic " + hex(magic) + ", found " +
                     hex(w.read<uint32_t>(0)));
      }
      FatbinWrapper wrapper;
      wrapper.member = member;
      wrapper.hip = hip;
      wrapper.file_offset = w.origin();
      wrapper.version = w.read<uint32_t>(4);
      wrapper.container_offset = resolve_pointer(elf, *seg, off + 8, relocs, symbols);
      if (!hip && wrapper.version == 2)
        wrapper.prelinked_offsets = read_prelinked(elf, w.read<uint64_t>(16));
      std::string where = member_prefix(member) + section + ": wrapper at file offset " +
                          hex(wrapper.file_offset);
      if (Status s = link_wrapper(elf, wrapper, where); !s) return s;
    }
    return {};
  }

  static Status load_relocations(const ElfFile& elf, const ElfSection& seg,
                                 std::vector<ElfRelocation>& relocs,
                                 std::vector<ElfSymbol>& symbols) {
    const ElfSection* rela = elf.relocations_for(seg.index);
    if (!rela) return {};
    Expected<std::vector<ElfRelocation>> r = elf.relocations(*rela);
    if (!r) return r.error();
    relocs = std::move(*r);
    if (rela->link >= elf.sections().size())
      return Error("relocation section links to missing symbol table [index " +
                   std::to_string(rela->link) + "]");
    Expected<std::vector<ElfSymbol>> s = elf.symbols(elf.sections()[rela->link]);
    if (!s) return s.error();
    symbols = std::move(*s);
    return {};
  }

  /// File offset (absolute) that the pointer at `seg_off` of `seg` refers to.
  static std::optional<uint64_t> resolve_pointer(const ElfFile& elf, const ElfSection& seg,
                                                 uint64_t seg_off,
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
  static std::vector<uint64_t> read_prelinked(const ElfFile& elf, uint64_t array_vaddr) {
    std::vector<uint64_t> out;
    if (array_vaddr == 0 || elf.type() == elf::ET_REL) return out;
    for (uint64_t i = 0; i < kMaxPrelinked; ++i) {
      std::optional<uint64_t> slot = elf.file_offset_of(array_vaddr + 8 * i, 8);
      if (!slot) break;
      uint64_t ptr = elf.bytes().read<uint64_t>(*slot);
      if (ptr == 0) break;
      if (std::optional<uint64_t> off = elf.file_offset_of(ptr, 16))
        out.push_back(elf.bytes().origin(*off));
    }
    return out;
  }

  /// Point the wrapper at its container, and adopt the containers it and its
  /// prelinked list point to that no section walk found.
  Status link_wrapper(const ElfFile& elf, FatbinWrapper& wrapper, const std::string& where) {
    uint32_t index = static_cast<uint32_t>(out_.wrappers_.size());
    out_.wrappers_.push_back(wrapper);
    if (wrapper.container_offset) {
      Expected<ContainerSite*> site = adopt(elf, *wrapper.container_offset, wrapper.member, where);
      if (!site) return site.error();
      if (!(*site)->wrapper) (*site)->wrapper = index;
    }
    for (uint64_t target : wrapper.prelinked_offsets)
      if (Expected<ContainerSite*> site = adopt(elf, target, wrapper.member, where + " (prelinked)");
          !site)
        return site.error();
    return {};
  }

  /// The container at file offset `target`: a known one, or parsed there now.
  Expected<ContainerSite*> adopt(const ElfFile& elf, uint64_t target, const std::string& member,
                                 const std::string& where) {
    if (ContainerSite* known = container_at(target); known && known->file_offset == target)
      return known;
    uint64_t local = target - elf.bytes().origin();
    if (target < elf.bytes().origin() || !elf.bytes().contains(local, 16))
      return Error(where + " points to file offset " + hex(target) + ", outside the object");
    const ElfSection* s = elf.section_at_offset(local);
    ByteView at = s ? s->data.from(local - s->offset) : elf.bytes().from(local);
    std::string section = s ? std::string(s->name) : "";
    if (OffloadBundle::has_magic(at) || CompressedBundle::has_magic(at)) {
      Expected<uint64_t> size = read_bundle(at, member, section, FoundBy::wrapper);
      if (!size) return size.error().within(where + " points to file offset " + hex(target));
      return &out_.containers_.back();
    }
    Expected<FatbinContainer> c = FatbinContainer::create(at);
    if (!c) return c.error().within(where + " points to file offset " + hex(target));
    add_fatbin(member, section, target, FoundBy::wrapper, *c);
    return &out_.containers_.back();
  }

  /// Strictly validated containers anywhere in the object's sections.
  /// Sections are searched in windows, and each window's pages released once
  /// searched, so scanning a large library keeps a small resident set.
  void scan_sections(const ElfFile& elf, const std::string& member) {
    constexpr uint64_t kWindow = 16 << 20;
    for (const ElfSection& s : elf.sections()) {
      ByteView d = s.data;
      for (uint64_t start = 0; start < d.size(); start += kWindow) {
        uint64_t end = std::min(d.size(), start + kWindow);
        uint64_t search_end = std::min(d.size(), end + 3);  // a magic may straddle windows
        for (uint64_t off = start; off < end;) {
          const void* hit = find_magic(d.data() + off, search_end - off);
          if (!hit) break;
          off = static_cast<const uint8_t*>(hit) - d.data();
          if (off >= end) break;  // the next window's
          uint64_t skip = try_scanned(d.from(off), member, std::string(s.name));
          off += skip ? skip : 1;
        }
        scan_bundles(d.sub(start, end - start), member, std::string(s.name));
        out_.file_->release(d.sub(start, end - start));
      }
    }
  }

  /// Offload bundles (plain or CCOB) in `window`, kept when they parse whole
  /// and every entry id has the "<kind>-<triple>-<target>" shape.
  void scan_bundles(ByteView window, const std::string& member, const std::string& section) {
    if (is_bundle_section(section)) return;
    for (uint64_t off = find_bundle(window, 0); off < window.size(); off = find_bundle(window, off)) {
      ByteView at = ByteView(window.data() + off, window.size() - off, window.origin(off));
      uint64_t skip = 0;
      if (const ContainerSite* c = container_at(at.origin())) {
        skip = c->file_offset + c->size - at.origin();
      } else if (plausible_bundle(at)) {
        Expected<uint64_t> size = read_bundle(at, member, section, FoundBy::scan);
        skip = size ? *size : 0;
      }
      off += std::max<uint64_t>(skip, 1);
    }
  }

  static bool is_bundle_section(const std::string& name) {
    return name == kBundleSection || name.rfind(kOffloadBundleMagic, 0) == 0;
  }

  /// A bundle whose entries all have well-formed ids (so that chance bytes
  /// after the magic are never reported).
  static bool plausible_bundle(ByteView at) {
    if (CompressedBundle::has_magic(at)) return CompressedBundle::create(at).ok();
    Expected<OffloadBundle> b = OffloadBundle::create(at);
    if (!b || b->entries().empty()) return false;
    for (const BundleEntry& e : b->entries())
      if (parse_bundle_id(e.id).triple.empty()) return false;
    return true;
  }

  /// Bitcode modules held as plain data (the Proteus host JIT's private string
  /// constants): the magic, then top-level blocks that walk cleanly and include
  /// a module block. Sections that are containers themselves are skipped.
  void scan_bitcode(const ElfFile& elf, const std::string& member) {
    static const char magic[4] = {'B', 'C', '\xC0', '\xDE'};
    constexpr uint64_t kWindow = 16 << 20;
    for (const ElfSection& s : elf.sections()) {
      if (is_container_section(s)) continue;
      ByteView d = s.data;
      for (uint64_t start = 0, off = 0; start < d.size(); start += kWindow) {
        uint64_t end = std::min(d.size(), start + kWindow);
        uint64_t search_end = std::min(d.size(), end + 3);  // a magic may straddle windows
        while (off < end) {
          const void* hit = memmem(d.data() + off, search_end - off, magic, 4);
          if (!hit) break;
          off = static_cast<const uint8_t*>(hit) - d.data();
          if (off >= end) break;  // the next window's
          uint64_t size = try_scanned_bitcode(d.from(off), member, std::string(s.name));
          off += size ? size : 1;
        }
        off = std::max(off, end);
        out_.file_->release(d.sub(start, end - start));
      }
    }
  }

  static bool is_container_section(const ElfSection& s) {
    for (const char* name : kFatbinSections)
      if (s.name == name) return true;
    return s.type == elf::SHT_NOBITS || s.name == kBundleSection || s.name == ".llvmbc" ||
           s.name == ".llvm.lto" || s.name == ".llvm.offloading" || s.type == kLtoSectionType ||
           s.type == kOffloadingSectionType || s.name.rfind(kOffloadBundleMagic, 0) == 0;
  }

  /// The size of a valid, new bitcode module at `at` (now added), or 0.
  uint64_t try_scanned_bitcode(ByteView at, const std::string& member, const std::string& section) {
    if (const ContainerSite* c = container_at(at.origin()))
      return c->file_offset + c->size - at.origin();
    std::vector<uint32_t> blocks;
    Expected<uint64_t> size = bitcode_module_size(at, &blocks);
    constexpr uint32_t kIdentificationBlock = 13, kModuleBlock = 8;
    if (!size || blocks.empty() || (blocks[0] != kIdentificationBlock && blocks[0] != kModuleBlock) ||
        std::find(blocks.begin(), blocks.end(), kModuleBlock) == blocks.end())
      return 0;
    ContainerSite site =
        site_for(member, section, at.origin(), FoundBy::scan, ContainerFormat::bitcode_section);
    site.size = *size;
    Image image;
    image.kind = ImageKind::bitcode;
    image.stored = at.sub(0, *size);
    image.file_offset = at.origin();
    image.size = *size;
    site.images.push_back(std::move(image));
    add(std::move(site));
    return *size;
  }

  static const void* find_magic(const uint8_t* p, uint64_t n) {
    static const uint8_t magic[4] = {0x50, 0xED, 0x55, 0xBA};
    return memmem(p, n, magic, 4);
  }

  /// Bytes to skip past a valid, new container at `at`, or 0.
  uint64_t try_scanned(ByteView at, const std::string& member, const std::string& section) {
    if (const ContainerSite* c = container_at(at.origin()))
      return c->file_offset + c->size - at.origin();
    Expected<FatbinContainer> c = FatbinContainer::create(at, {/*known_kinds_only=*/true});
    if (!c) return 0;
    add_fatbin(member, section, at.origin(), FoundBy::scan, *c);
    return c->total_size();
  }

  Binary& out_;
  BinaryOptions options_;
  std::map<uint64_t, std::pair<uint64_t, size_t>> known_;  // start -> (end, container index)
};

Expected<Binary> Binary::open(const std::string& path, BinaryOptions options) {
  Expected<std::shared_ptr<const MappedFile>> file = MappedFile::open(path);
  if (!file) return file.error();
  Binary b;
  b.file_ = *file;
  BinaryReader reader(b, options);
  if (Status s = reader.read_file(b.file_->bytes()); !s) return s.error().within(path);
  std::stable_sort(b.containers_.begin(), b.containers_.end(),
                   [](const ContainerSite& x, const ContainerSite& y) {
                     return x.file_offset < y.file_offset;
                   });
  return b;
}

std::string Binary::image_label(uint32_t container, uint32_t image) const {
  const Image& i = containers_[container].images[image];
  return "container #" + std::to_string(container) + " image #" + std::to_string(image) + " (" +
         (i.target.empty() ? "" : i.target + " ") + name(i.kind) + ")";
}

Expected<DeviceCode> Binary::device_code(uint32_t container, uint32_t image) const {
  Scratch scratch;
  return device_code(container, image, scratch);
}

Expected<DeviceCode> Binary::device_code(uint32_t container, uint32_t image,
                                         Scratch& scratch, bool digest) const {
  if (container >= containers_.size() || image >= containers_[container].images.size())
    return Error("no image " + std::to_string(container) + "/" + std::to_string(image));
  const Image& i = containers_[container].images[image];
  CodeKind kind = code_kind_of(i.kind);
  if (kind == CodeKind::unknown || (i.fatbin && i.fatbin->obfuscated())) return DeviceCode{};
  Expected<ByteView> bytes = decode_image(i, scratch);
  Expected<DeviceCode> code = !bytes                          ? Expected<DeviceCode>(bytes.error())
                              : kind == CodeKind::ptx         ? parse_ptx(*bytes)
                              : kind == CodeKind::code_object ? parse_code_object(*bytes)
                                                              : parse_cubin(*bytes);
  if (!code) code.error().within(path() + ": " + image_label(container, image));
  else if (digest) code->image_digest = xxh3_128(*bytes);
  return code;
}

std::vector<Expected<DeviceCode>> Binary::all_device_code(
    unsigned threads, const std::function<void(size_t, size_t)>& progress) const {
  std::vector<ImageRef> images;
  for (uint32_t c = 0; c < containers_.size(); ++c)
    for (uint32_t i = 0; i < containers_[c].images.size(); ++i) images.emplace_back(c, i);
  return device_code_of(images, threads, progress);
}

std::vector<Expected<DeviceCode>> Binary::device_code_of(
    const std::vector<ImageRef>& images, unsigned threads,
    const std::function<void(size_t, size_t)>& progress, bool digests) const {
  std::vector<Expected<DeviceCode>> out(images.size(), Expected<DeviceCode>(DeviceCode{}));
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, std::max<size_t>(1, images.size()));
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress_mutex;
  auto work = [&] {
    Scratch scratch;
    for (size_t i; (i = next++) < images.size();) {
      auto [c, e] = images[i];
      out[i] = device_code(c, e, scratch, digests);
      if (c < containers_.size() && e < containers_[c].images.size() &&
          containers_[c].images[e].file_offset)
        file_->release(containers_[c].images[e].stored);  // decoded: not needed now
      size_t n = ++done;
      if (progress && progress_mutex.try_lock()) {
        progress(n, images.size());
        progress_mutex.unlock();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

}  // namespace kir
