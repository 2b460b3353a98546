// Discoverer: clang offload bundles — plain (`__CLANG_OFFLOAD_BUNDLE__`) or
// compressed (CCOB, inflated here since the entry table is inside) — in
// `.hip_fatbin`, anywhere by scan, behind HIP's {"HIPF", version, bundle}
// wrapper at __hipRegisterFatBinary; and `clang-offload-bundler --type=o`
// objects, one `__CLANG_OFFLOAD_BUNDLE__<id>` section per entry.
#include "kir/discover.hpp"

#include "kir/llvm/bitcode.hpp"
#include "kir/object/elf.hpp"
#include "wrapper.hpp"

namespace kir {

namespace {

/// What a bundle entry's bytes are, from their magic.
ImageKind classify_entry(const BundleId& id, ByteView data) {
  if (id.host()) return ImageKind::host;
  if (is_bitcode(data)) return ImageKind::bitcode;
  if (ElfFile::is_elf(data)) return classify_elf(data);
  return data.empty() ? ImageKind::empty : ImageKind::unknown;
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

/// Scanning: a bundle whose entries all have well-formed ids (so that chance
/// bytes after the magic are never reported).
Status plausible(const OffloadBundle& b) {
  if (b.entries().empty()) return Error(ErrorCode::malformed, "bundle: no entries");
  for (const BundleEntry& e : b.entries())
    if (parse_bundle_id(e.id).triple.empty())
      return Error(ErrorCode::malformed, "bundle: entry id '" + e.id + "' has no triple");
  return {};
}

}  // namespace

Expected<ContainerSite> discover_bundle(ByteView at, DiscoverOptions options) {
  ContainerSite site;
  site.file_offset = at.origin();
  site.format = ContainerFormat::offload_bundle;
  ByteView table = at;
  if (CompressedBundle::has_magic(at)) {
    Expected<CompressedBundle> c = CompressedBundle::create(at);
    if (!c) return c.error();
    Expected<std::vector<uint8_t>> inflated = c->decompress();
    if (!inflated) return inflated.error();
    site.inflated = std::make_shared<const std::vector<uint8_t>>(std::move(*inflated));
    site.version = c->version;
    site.size = c->total_size;
    site.compression = name(c->codec == BundleCodec::zstd ? Codec::zstd : Codec::zlib);
    table = ByteView(site.inflated->data(), site.inflated->size());
  }
  Expected<OffloadBundle> bundle = OffloadBundle::create(table);
  if (!bundle) return bundle.error().within(site.inflated ? "decompressed bundle" : "bundle");
  // (a compressed bundle whose header parses is kept whatever its ids: its MD5 checked out)
  if (options.strict && !site.inflated)
    if (Status s = plausible(*bundle); !s) return s.error();
  if (!site.inflated) site.size = bundle->total_size();
  for (const BundleEntry& e : bundle->entries())
    site.images.push_back(image_from_bundle(e, uint32_t(site.images.size()), !site.inflated));
  return site;
}

std::optional<ContainerSite> discover_object_bundle(const ElfFile& elf) {
  ContainerSite site;
  for (const ElfSection& s : elf.sections()) {
    if (s.name.rfind(kOffloadBundleMagic, 0) != 0 || s.name.size() == kOffloadBundleMagic.size()) continue;
    if (site.images.empty()) {
      site.section = std::string(kOffloadBundleMagic) + "*";
      site.file_offset = s.data.origin();
      site.format = ContainerFormat::object_bundle;
    }
    BundleEntry e{std::string(s.name.substr(kOffloadBundleMagic.size())), 0, s.data.size(), s.data};
    site.images.push_back(image_from_bundle(e, uint32_t(site.images.size()), true));
    site.size += s.data.size();
  }
  if (site.images.empty()) return std::nullopt;
  return site;
}

Expected<ContainerSite> discover_bundle_in_memory(ByteView at) {
  std::string where = "bundle at " + hex(reinterpret_cast<uintptr_t>(at.data()));
  if (CompressedBundle::has_magic(at)) {  // v2/v3 headers give the size; v1 does not
    Expected<CompressedBundle> c = CompressedBundle::create(at);
    if (!c) return c.error().within(where);
    if (c->version < 2)
      return Error(ErrorCode::unsupported,
                   where + ": compressed bundle version 1 does not record its size: it cannot be read from memory");
  }
  Expected<ContainerSite> site = discover_bundle(at);
  if (!site) return site.error().within(where);
  return site;
}

Expected<ContainerSite> discover_registered_bundle(const void* wrapper, uint64_t max_size, ReadableExtent readable) {
  Expected<ByteView> at = discover::registered_data(wrapper, kHipWrapperMagic, max_size, readable);
  if (!at) return at.error();
  Expected<ContainerSite> site = discover_bundle_in_memory(*at);
  if (site) site->found_by = FoundBy::wrapper;
  return site;
}

}  // namespace kir
