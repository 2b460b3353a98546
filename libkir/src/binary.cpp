#include "kir/binary.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "kir/object/archive.hpp"
#include "kir/object/elf.hpp"

namespace kir {

namespace {

constexpr const char* kFatbinSections[] = {".nv_fatbin", "__nv_relfatbin"};
constexpr const char* kWrapperSection = ".nvFatBinSegment";
constexpr uint64_t kWrapperSize = 24;
constexpr uint64_t kMaxPrelinked = 1 << 16;

std::string member_prefix(const std::string& member) {
  return member.empty() ? std::string() : "member '" + member + "': ";
}

}  // namespace

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
    if (!ElfFile::is_elf(bytes)) return Error(not_recognized(bytes));
    out_.format_ = "elf";
    return read_object(bytes, "");
  }

 private:
  static std::string not_recognized(ByteView bytes) {
    if (bytes.empty()) return "empty file: not an ELF file, ar archive or fatbin";
    std::string head;
    for (uint64_t i = 0; i < std::min<uint64_t>(4, bytes.size()); ++i)
      head += (i ? " " : "") + hex(bytes.data()[i]).substr(2);
    return "not an ELF file, ar archive or fatbin (first bytes: " + head + ")";
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
    for (const char* name : kFatbinSections)
      for (const ElfSection& s : elf->sections())
        if (s.name == name && s.type != elf::SHT_NOBITS)
          if (Status st = walk_containers(s.data, member, name); !st) return st;
    if (Status st = read_wrappers(*elf, member); !st) return st;
    if (options_.scan) scan_sections(*elf, member);
    return {};
  }

  /// Containers back to back in `bytes`, 8-aligned, zero padding between.
  Status walk_containers(ByteView bytes, const std::string& member, const std::string& section) {
    uint64_t off = 0, released = 0;
    while (off < bytes.size()) {
      ByteView at = bytes.from(off);
      if (is_zero_padding(at)) {
        off += std::min<uint64_t>(8, at.size());
        continue;
      }
      Expected<FatbinContainer> c = FatbinContainer::create(at);
      if (!c)
        return c.error().within(member_prefix(member) + section + ": container #" +
                                std::to_string(out_.containers_.size()) + " at file offset " +
                                hex(at.origin()));
      uint64_t size = c->total_size();
      add(member, section, at.origin(), FoundBy::section, std::move(*c));
      off = std::min(align_up(off + size, 8), bytes.size());
      release(bytes, released, off);
    }
    release(bytes, released, off, true);
    return {};
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

  void add(const std::string& member, const std::string& section, uint64_t offset, FoundBy how,
           FatbinContainer c) {
    known_.emplace(offset, std::make_pair(offset + c.total_size(), out_.containers_.size()));
    out_.containers_.push_back({member, section, offset, how, std::move(c), std::nullopt});
  }

  /// The known container whose bytes hold file offset `offset`, or nullptr.
  ContainerSite* container_at(uint64_t offset) {
    auto it = known_.upper_bound(offset);
    if (it == known_.begin()) return nullptr;
    --it;
    return offset < it->second.first ? &out_.containers_[it->second.second] : nullptr;
  }

  Status read_wrappers(const ElfFile& elf, const std::string& member) {
    const ElfSection* seg = elf.section_by_name(kWrapperSection);
    if (!seg || seg->type == elf::SHT_NOBITS) return {};
    std::vector<ElfRelocation> relocs;
    std::vector<ElfSymbol> symbols;
    if (elf.type() == elf::ET_REL)
      if (Status s = load_relocations(elf, *seg, relocs, symbols); !s)
        return s.error().within(member_prefix(member) + kWrapperSection);
    for (uint64_t off = 0; off + kWrapperSize <= seg->size; off += kWrapperSize) {
      ByteView w = seg->data.sub(off, kWrapperSize);
      if (w.read<uint32_t>(0) != kFatbinWrapperMagic) {
        if (w.read<uint64_t>(0) == 0) continue;  // padding
        return Error(member_prefix(member) + kWrapperSection + ": wrapper at file offset " +
                     hex(w.origin()) + ": expected magic 0x466243b1, found " +
                     hex(w.read<uint32_t>(0)));
      }
      FatbinWrapper wrapper;
      wrapper.member = member;
      wrapper.file_offset = w.origin();
      wrapper.version = w.read<uint32_t>(4);
      wrapper.container_offset = resolve_pointer(elf, *seg, off + 8, relocs, symbols);
      if (wrapper.version == 2) wrapper.prelinked_offsets = read_prelinked(elf, w.read<uint64_t>(16));
      if (Status s = link_wrapper(elf, wrapper, member); !s) return s;
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
  Status link_wrapper(const ElfFile& elf, FatbinWrapper& wrapper, const std::string& member) {
    uint32_t index = static_cast<uint32_t>(out_.wrappers_.size());
    out_.wrappers_.push_back(wrapper);
    std::string where = member_prefix(member) + kWrapperSection + ": wrapper at file offset " +
                        hex(wrapper.file_offset);
    if (wrapper.container_offset) {
      Expected<ContainerSite*> site = adopt(elf, *wrapper.container_offset, member, where);
      if (!site) return site.error();
      if (!(*site)->wrapper) (*site)->wrapper = index;
    }
    for (uint64_t target : wrapper.prelinked_offsets)
      if (Expected<ContainerSite*> site = adopt(elf, target, member, where + " (prelinked)"); !site)
        return site.error();
    return {};
  }

  /// The container at file offset `target`: a known one, or parsed there now.
  Expected<ContainerSite*> adopt(const ElfFile& elf, uint64_t target, const std::string& member,
                                 const std::string& where) {
    if (ContainerSite* known = container_at(target); known && known->file_offset == target)
      return known;
    uint64_t local = target - elf.bytes().origin();
    const ElfSection* s = elf.section_at_offset(local);
    ByteView at = s ? s->data.from(local - s->offset) : elf.bytes().from(local);
    Expected<FatbinContainer> c = FatbinContainer::create(at);
    if (!c) return c.error().within(where + " points to file offset " + hex(target));
    add(member, s ? std::string(s->name) : "", target, FoundBy::wrapper, std::move(*c));
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
        out_.file_->release(d.sub(start, end - start));
      }
    }
  }

  static const void* find_magic(const uint8_t* p, uint64_t n) {
    static const uint8_t magic[4] = {0x50, 0xED, 0x55, 0xBA};
    return memmem(p, n, magic, 4);
  }

  /// Bytes to skip past a valid, new container at `at`, or 0.
  uint64_t try_scanned(ByteView at, const std::string& member, const std::string& section) {
    if (const ContainerSite* c = container_at(at.origin()))
      return c->file_offset + c->fatbin.total_size() - at.origin();
    Expected<FatbinContainer> c = FatbinContainer::create(at, {/*known_kinds_only=*/true});
    if (!c) return 0;
    uint64_t size = c->total_size();
    add(member, section, at.origin(), FoundBy::scan, std::move(*c));
    return size;
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

std::string Binary::image_label(uint32_t container, uint32_t entry) const {
  const FatbinEntry& e = containers_[container].fatbin.entries()[entry];
  return "container #" + std::to_string(container) + " entry #" + std::to_string(entry) +
         " (sm_" + std::to_string(e.arch) + " " + image_kind_name(e.kind) + ")";
}

Expected<DeviceCode> Binary::device_code(uint32_t container, uint32_t entry) const {
  Scratch scratch;
  return device_code(container, entry, scratch);
}

Expected<DeviceCode> Binary::device_code(uint32_t container, uint32_t entry,
                                         Scratch& scratch) const {
  if (container >= containers_.size() || entry >= containers_[container].fatbin.entries().size())
    return Error("no image " + std::to_string(container) + "/" + std::to_string(entry));
  const FatbinEntry& e = containers_[container].fatbin.entries()[entry];
  if (e.obfuscated() || (e.kind != uint16_t(ImageKind::cubin) && e.kind != uint16_t(ImageKind::ptx)))
    return DeviceCode{};
  Expected<ByteView> bytes = decode_image(e, scratch);
  Expected<DeviceCode> code = !bytes ? Expected<DeviceCode>(bytes.error())
                              : e.kind == uint16_t(ImageKind::ptx) ? parse_ptx(*bytes)
                                                                   : parse_cubin(*bytes);
  if (!code) code.error().within(path() + ": " + image_label(container, entry));
  return code;
}

std::vector<Expected<DeviceCode>> Binary::all_device_code(
    unsigned threads, const std::function<void(size_t, size_t)>& progress) const {
  std::vector<ImageRef> images;
  for (uint32_t c = 0; c < containers_.size(); ++c)
    for (uint32_t e = 0; e < containers_[c].fatbin.entries().size(); ++e) images.emplace_back(c, e);
  return device_code_of(images, threads, progress);
}

std::vector<Expected<DeviceCode>> Binary::device_code_of(
    const std::vector<ImageRef>& images, unsigned threads,
    const std::function<void(size_t, size_t)>& progress) const {
  std::vector<Expected<DeviceCode>> out(images.size(), Expected<DeviceCode>(DeviceCode{}));
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, std::max<size_t>(1, images.size()));
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress_mutex;
  auto work = [&] {
    Scratch scratch;
    for (size_t i; (i = next++) < images.size();) {
      auto [c, e] = images[i];
      out[i] = device_code(c, e, scratch);
      if (c < containers_.size() && e < containers_[c].fatbin.entries().size())
        file_->release(containers_[c].fatbin.entries()[e].payload);  // decoded: not needed now
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
