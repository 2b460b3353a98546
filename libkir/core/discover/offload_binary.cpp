// Discoverer: LLVM offloading binaries (magic 10 FF 10 AD; `.llvm.offloading`,
// section type SHT_LLVM_OFFLOADING), v3's compressed entries inflated.
#include "kir/discover.hpp"

namespace kir {

namespace {

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

}  // namespace

Expected<ContainerSite> discover_offload_binary(ByteView at) {
  Expected<OffloadBinary> b = OffloadBinary::create(at);
  if (!b) return b.error();
  ContainerSite site;
  site.file_offset = at.origin();
  site.format = ContainerFormat::offload_binary;
  site.version = b->version();
  site.size = b->total_size();
  site.inflated = b->inflated();
  if (b->compressed()) site.compression = "compressed";
  for (const OffloadBinaryEntry& e : b->entries())
    site.images.push_back(image_from_offload_entry(e, uint32_t(site.images.size()), !b->compressed()));
  return site;
}

}  // namespace kir
