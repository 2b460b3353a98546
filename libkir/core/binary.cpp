#include "kir/binary.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <numeric>
#include <system_error>
#include <thread>

#include "discover/scan.hpp"
#include "discover/wrapper.hpp"
#include "kir/amdgpu/code_object.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/discover.hpp"
#include "kir/llvm/bitcode.hpp"
#include "kir/object/archive.hpp"
#include "kir/object/elf.hpp"

// Binary::open places containers in a file: which sections hold which format,
// archive members, wrappers pointing at containers, the magic scan. Reading a
// container is its format's discoverer's job (kir/discover.hpp).

namespace kir {

namespace {

constexpr const char* kFatbinSections[] = {".nv_fatbin", "__nv_relfatbin"};
constexpr const char* kBundleSection = ".hip_fatbin";
constexpr const char* kWrapperSections[] = {".nvFatBinSegment", ".hipFatBinSegment"};
constexpr uint32_t kOffloadingSectionType = 0x6fff4c0b;  // SHT_LLVM_OFFLOADING
constexpr uint32_t kLtoSectionType = 0x6fff4c0c;         // SHT_LLVM_LTO (-ffat-lto-objects)

std::string member_prefix(const std::string& member) {
  return member.empty() ? std::string() : "member '" + member + "': ";
}

bool is_bundle_section(std::string_view name) {
  return name == kBundleSection || name.rfind(kOffloadBundleMagic, 0) == 0;
}

/// Sections whose bytes are a container themselves (the bitcode scan skips them).
bool is_container_section(const ElfSection& s) {
  for (const char* name : kFatbinSections)
    if (s.name == name) return true;
  return s.type == elf::SHT_NOBITS || s.name == kBundleSection || s.name == ".llvmbc" || s.name == ".llvm.lto" ||
         s.name == ".llvm.offloading" || s.type == kLtoSectionType || s.type == kOffloadingSectionType ||
         s.name.rfind(kOffloadBundleMagic, 0) == 0;
}

/// A section of data the program loads (.rodata, .data, .ldata, ...): allocated, not
/// code, with bytes in the file, and no container section of its own.
bool is_data_section(const ElfSection& s) {
  return s.type == elf::SHT_PROGBITS && (s.flags & elf::SHF_ALLOC) && !(s.flags & elf::SHF_EXECINSTR) &&
         !is_container_section(s) && !is_bundle_section(s.name);
}

/// `.llvmcmd`'s NUL-separated cc1 arguments, joined by spaces ("" when none).
std::string llvm_command(const ElfFile& elf) {
  std::string command;
  if (const ElfSection* cmd = elf.section_by_name(".llvmcmd"))
    for (uint64_t i = 0; i < cmd->data.size(); i += cmd->data.c_string(i).size() + 1)
      command += (command.empty() ? "" : " ") + std::string(cmd->data.c_string(i));
  return command;
}

}  // namespace

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

/// Fills a Binary from one file: where each format's containers are.
class BinaryReader {
 public:
  BinaryReader(Binary& out, BinaryOptions options) : out_(out), options_(options) {}

  Status read_file(ByteView bytes) {
    if (Archive::is_archive(bytes)) return read_archive(bytes);
    if (FatbinContainer::has_magic(bytes)) {
      out_.format_ = "fatbin";
      return walk(bytes, "", "", discover_fatbin_at, "container #", true);
    }
    if (OffloadBundle::has_magic(bytes) || CompressedBundle::has_magic(bytes)) {
      out_.format_ = "offload-bundle";
      return walk_bundles(bytes, "", "");
    }
    if (OffloadBinary::has_magic(bytes)) {
      out_.format_ = "offload-binary";
      return walk(bytes, "", "", discover_offload_binary, "offloading binary");
    }
    if (is_bitcode(bytes)) {  // a bare module, as `-emit-llvm -c` writes it: one IR image
      out_.format_ = "bitcode";
      Expected<ContainerSite> site = discover_bitcode_file(bytes);
      if (!site) return site.error().within("bitcode file");
      add(std::move(*site));
      return {};
    }
    if (!ElfFile::is_elf(bytes)) return Error(ErrorCode::bad_magic, not_recognized(bytes), bytes.origin(0));
    if (Expected<ContainerSite> site = discover_device_elf(bytes)) {  // a cubin or code object file
      out_.format_ = name(site->images.front().kind);
      add(std::move(*site));
      return {};
    }
    out_.format_ = "elf";
    return read_object(bytes, "");
  }

 private:
  static Expected<ContainerSite> discover_fatbin_at(ByteView at) { return discover_fatbin(at); }

  static std::string not_recognized(ByteView bytes) {
    if (bytes.empty()) return "empty file: not an ELF file, ar archive, fatbin or offload bundle, nor LLVM bitcode";
    std::string head;
    for (uint64_t i = 0; i < std::min<uint64_t>(4, bytes.size()); ++i)
      head += (i ? " " : "") + hex(bytes.data()[i]).substr(2);
    return "not an ELF file, ar archive, fatbin or offload bundle, nor LLVM bitcode (first bytes: " + head + ")";
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
      std::string section(s.name);
      Status st;
      for (const char* name : kFatbinSections)
        if (s.name == name) st = walk(s.data, member, section, discover_fatbin_at, "container #", true);
      if (st && s.name == kBundleSection) st = walk_bundles(s.data, member, section);
      if (st && (s.type == kOffloadingSectionType || s.name == ".llvm.offloading"))
        st = walk(s.data, member, section, discover_offload_binary, "offloading binary");
      if (st && (s.name == ".llvmbc" || s.name == ".llvm.lto" || s.type == kLtoSectionType)) {
        Expected<ContainerSite> site = discover_bitcode_section(s.data, s.name == ".llvmbc" ? llvm_command(*elf) : "");
        if (!site) return site.error().within(member_prefix(member) + section);
        site->size = s.data.size();
        place(*site, member, section, FoundBy::section);
      }
      if (!st) return st;
    }
    if (std::optional<ContainerSite> site = discover_object_bundle(*elf))
      place(*site, member, site->section, FoundBy::section);
    for (const char* section : kWrapperSections)
      if (Status st = read_wrappers(*elf, member, section); !st) return st;
    if (options_.scan || options_.scan_data) scan(*elf, member, /*data_only=*/!options_.scan);
    return {};
  }

  /// Containers back to back in `bytes`, each 8-aligned, zero padding between
  /// (fatbins in `.nv_fatbin`, offloading binaries in `.llvm.offloading`).
  Status walk(ByteView bytes, const std::string& member, const std::string& section,
              Expected<ContainerSite> (*discover)(ByteView), const char* what, bool numbered = false) {
    uint64_t off = 0, released = 0;
    while (off < bytes.size()) {
      ByteView at = bytes.from(off);
      if (is_zero_padding(at)) {
        off += std::min<uint64_t>(8, at.size());
        continue;
      }
      Expected<ContainerSite> site = discover(at);
      if (!site)  // "container #3 at file offset 0x…" / "offloading binary at file offset 0x…"
        return site.error().within(member_prefix(member) + section + ": " + what +
                                   (numbered ? std::to_string(out_.containers_.size()) : "") + " at file offset " +
                                   hex(at.origin()));
      uint64_t size = site->size;
      place(*site, member, section, FoundBy::section);
      off = std::min(align_up(off + size, 8), bytes.size());
      release(bytes, released, off);
    }
    release(bytes, released, off, true);
    return {};
  }

  /// Offload bundles (plain or compressed) in `bytes`, found by their magic.
  Status walk_bundles(ByteView bytes, const std::string& member, const std::string& section) {
    uint64_t off = 0;
    while (off < bytes.size()) {
      uint64_t next = discover::next_magic(bytes, off, bytes.size(), {kOffloadBundleMagic, kCompressedBundleMagic});
      if (next >= bytes.size()) break;
      Expected<ContainerSite> site = discover_bundle(bytes.from(next));
      if (!site)
        return site.error().within(member_prefix(member) + section + ": bundle at file offset " +
                                   hex(bytes.origin(next)));
      uint64_t size = site->size;
      place(*site, member, section, FoundBy::section);
      off = next + std::max<uint64_t>(size, 1);
    }
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

  /// Add a discovered site at its place in the file.
  void place(ContainerSite& site, const std::string& member, const std::string& section, FoundBy how) {
    site.member = member;
    site.section = section;
    site.found_by = how;
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
    if (!seg) return {};
    std::string prefix = member_prefix(member) + section;
    return discover::read_wrappers(elf, *seg, member, prefix, [&](FatbinWrapper& wrapper) {
      return link_wrapper(elf, wrapper, prefix + ": wrapper at file offset " + hex(wrapper.file_offset));
    });
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
      if (Expected<ContainerSite*> site = adopt(elf, target, wrapper.member, where + " (prelinked)"); !site)
        return site.error();
    return {};
  }

  /// The container at file offset `target`: a known one, or discovered there now.
  Expected<ContainerSite*> adopt(const ElfFile& elf, uint64_t target, const std::string& member,
                                 const std::string& where) {
    if (ContainerSite* known = container_at(target); known && known->file_offset == target) return known;
    uint64_t local = target - elf.bytes().origin();
    if (target < elf.bytes().origin() || !elf.bytes().contains(local, 16))
      return Error(ErrorCode::out_of_bounds, where + " points to file offset " + hex(target) + ", outside the object");
    const ElfSection* s = elf.section_at_offset(local);
    ByteView at = s ? s->data.from(local - s->offset) : elf.bytes().from(local);
    bool bundle = OffloadBundle::has_magic(at) || CompressedBundle::has_magic(at);
    Expected<ContainerSite> site = bundle ? discover_bundle(at) : discover_fatbin(at);
    if (!site) return site.error().within(where + " points to file offset " + hex(target));
    place(*site, member, s ? std::string(s->name) : "", FoundBy::wrapper);
    return &out_.containers_.back();
  }

  /// With BinaryOptions::scan: strictly validated containers of every format
  /// anywhere in the object's sections, by their magic. Sections are searched
  /// in windows, each window's pages released once searched, so scanning a
  /// large library keeps a small resident set. `data_only` (BinaryOptions::scan_data):
  /// fatbins only, in the data sections a program loads (not code, not a section
  /// whose bytes are a container already).
  void scan(const ElfFile& elf, const std::string& member, bool data_only) {
    constexpr uint64_t kWindow = 16 << 20, kDataFatbinAlign = 8;
    for (const ElfSection& s : elf.sections()) {
      if (data_only && !is_data_section(s)) continue;
      ByteView d = s.data;
      std::string section(s.name);
      bool bundles = !data_only && !is_bundle_section(s.name), bitcode = !data_only && !is_container_section(s);
      uint64_t fatbin_off = 0, bundle_off = 0, bitcode_off = 0;
      for (uint64_t start = 0; start < d.size(); start += kWindow) {
        uint64_t end = std::min(d.size(), start + kWindow);
        auto fatbin_at = [&](uint64_t off) {
          return try_scanned(d.from(off), member, section,
                             [](ByteView at) { return discover_fatbin(at, {/*strict=*/true}); });
        };
        // --scan: every byte; the default data-section search: 8-byte boundaries, where
        // fatbins are (discover::next_aligned_magic).
        fatbin_off = data_only ? discover::find_aligned_magic(d, fatbin_off, end, discover::kFatbinMagicText,
                                                              kDataFatbinAlign, fatbin_at)
                               : discover::find_magic(d, fatbin_off, end, {discover::kFatbinMagicText}, fatbin_at);
        if (bundles)
          bundle_off = discover::find_magic(
              d, bundle_off, end, {kOffloadBundleMagic, kCompressedBundleMagic}, [&](uint64_t off) {
                return try_scanned(d.from(off), member, section,
                                   [](ByteView at) { return discover_bundle(at, {/*strict=*/true}); });
              });
        if (bitcode)
          bitcode_off = discover::find_magic(d, bitcode_off, end, {discover::kBitcodeMagicText}, [&](uint64_t off) {
            return try_scanned(d.from(off), member, section, discover_bitcode_module);
          });
        out_.file_->release(d.sub(start, end - start));
      }
    }
  }

  /// Bytes to skip past a known container holding `at`, or past a new one
  /// discovered there (and added); 0 when there is none.
  template <class Discover>
  uint64_t try_scanned(ByteView at, const std::string& member, const std::string& section, Discover&& discover) {
    if (const ContainerSite* c = container_at(at.origin())) return c->file_offset + c->size - at.origin();
    Expected<ContainerSite> site = discover(at);
    if (!site) return 0;
    uint64_t size = site->size;
    place(*site, member, section, FoundBy::scan);
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
  // By file offset, ties in discovery order. Not std::stable_sort: libstdc++'s
  // reaches the deprecated std::get_temporary_buffer, an error under clang's
  // -Werror (the libFuzzer build).
  std::vector<size_t> order(b.containers_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    uint64_t ox = b.containers_[x].file_offset, oy = b.containers_[y].file_offset;
    return ox != oy ? ox < oy : x < y;
  });
  std::vector<ContainerSite> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(std::move(b.containers_[i]));
  b.containers_ = std::move(sorted);
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

Expected<DeviceCode> Binary::device_code(uint32_t container, uint32_t image, Scratch& scratch, bool digest) const {
  if (container >= containers_.size() || image >= containers_[container].images.size())
    return Error(ErrorCode::invalid_argument, "no image " + std::to_string(container) + "/" + std::to_string(image));
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

std::vector<Expected<DeviceCode>> Binary::all_device_code(unsigned threads,
                                                          const std::function<void(size_t, size_t)>& progress) const {
  std::vector<ImageRef> images;
  for (uint32_t c = 0; c < containers_.size(); ++c)
    for (uint32_t i = 0; i < containers_[c].images.size(); ++i) images.emplace_back(c, i);
  return device_code_of(images, threads, progress);
}

std::vector<Expected<DeviceCode>> Binary::device_code_of(const std::vector<ImageRef>& images, unsigned threads,
                                                         const std::function<void(size_t, size_t)>& progress,
                                                         bool digests) const {
  std::vector<Expected<DeviceCode>> out(images.size(), Expected<DeviceCode>(DeviceCode{}));
  // At most one thread per core (and per image): more only cost memory and stacks.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  threads = threads == 0 ? cores : std::min(threads, cores);
  threads = std::min<unsigned>(threads, std::max<size_t>(1, images.size()));
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress_mutex, failure_mutex;
  std::exception_ptr failure;  // the first exception from a progress callback: rethrown after the join
  auto work = [&] {
    try {
      Scratch scratch;
      for (size_t i; (i = next++) < images.size();) {
        auto [c, e] = images[i];
        try {
          out[i] = device_code(c, e, scratch, digests);
        } catch (const std::bad_alloc&) {  // this image, not the process
          out[i] = Error(ErrorCode::internal, "image " + std::to_string(i) + ": out of memory while decoding it");
          scratch = Scratch{};
        }
        if (c < containers_.size() && e < containers_[c].images.size() && containers_[c].images[e].file_offset)
          file_->release(containers_[c].images[e].stored);  // decoded: not needed now
        size_t n = ++done;
        if (progress && progress_mutex.try_lock()) {
          std::lock_guard<std::mutex> unlock(progress_mutex, std::adopt_lock);
          progress(n, images.size());
        }
      }
    } catch (...) {  // never out of a thread (std::terminate): stop the others, rethrow on the caller's
      next = images.size();
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  {
    std::vector<std::thread> pool;
    struct Joiner {  // joins on every path, a failed thread start included
      std::vector<std::thread>& pool;
      ~Joiner() {
        for (std::thread& t : pool)
          if (t.joinable()) t.join();
      }
    } joiner{pool};
    for (unsigned t = 1; t < threads; ++t) {
      try {
        pool.emplace_back(work);
      } catch (const std::system_error&) {  // no more threads: go on with those there are
        break;
      }
    }
    work();
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

}  // namespace kir
