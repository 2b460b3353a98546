// Discoverer: a device image that is its own container — a cubin or AMDGPU
// code object file (`nvcc -cubin`, a `kir extract`ed image), or the bare image
// an application hands to cuModuleLoadData (fatbin, ELF or PTX text) or to
// hipModuleLoadData (ELF code object, clang offload bundle, plain or CCOB).
#include "kir/discover.hpp"

#include <cstring>

#include "kir/amdgpu/code_object.hpp"
#include "kir/llvm/offload_bundle.hpp"
#include "kir/object/elf.hpp"

namespace kir {

namespace {

ContainerSite one_image(ByteView bytes, ImageKind kind) {
  ContainerSite site;
  site.file_offset = bytes.origin();
  site.format = ContainerFormat::device_elf;
  site.size = bytes.size();
  Image image;
  image.kind = kind;
  image.stored = bytes;
  image.file_offset = bytes.origin();
  image.size = bytes.size();
  site.images.push_back(std::move(image));
  return site;
}

}  // namespace

std::string cubin_arch(ByteView elf) {
  if (elf.size() < 0x34) return "";  // a truncated header: parse_cubin says what is wrong
  uint8_t abi_version = elf.read<uint8_t>(8);
  uint32_t flags = elf.read<uint32_t>(0x30);
  uint32_t sm = abi_version >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
  return "sm_" + std::to_string(sm);
}

ImageKind classify_elf(ByteView data) {
  if (!ElfFile::is_elf(data) || data.size() < 20) return ImageKind::unknown;
  uint16_t machine = data.read<uint16_t>(18);
  return machine == elf::EM_AMDGPU ? ImageKind::code_object
         : machine == elf::EM_CUDA ? ImageKind::cubin
                                   : ImageKind::object;
}

Expected<ContainerSite> discover_device_elf(ByteView bytes) {
  ImageKind kind = classify_elf(bytes);
  if (kind != ImageKind::cubin && kind != ImageKind::code_object)
    return Error(ErrorCode::bad_magic, "not a cubin or AMDGPU code object");
  if (Expected<ElfFile> elf = ElfFile::create(bytes); !elf) return elf.error();
  ContainerSite site = one_image(bytes, kind);
  Image& image = site.images.front();
  if (kind == ImageKind::cubin) {
    image.target = cubin_arch(bytes);
    image.triple = "nvptx64-nvidia-cuda";
  } else if (Expected<DeviceCode> code = parse_code_object(bytes)) {
    // "amdgcn-amd-amdhsa--gfx90a:xnack+": the triple (empty environment), then the target.
    size_t split = code->target.find("--");
    if (split != std::string::npos) {
      image.triple = code->target.substr(0, split + 1);  // as bundle ids spell it: "amdgcn-amd-amdhsa-"
      image.target = code->target.substr(split + 2);
    }
  }
  return site;
}

Expected<ContainerSite> sized_device_image(const void* image, uint64_t max_size) {
  if (!image) return Error(ErrorCode::invalid_argument, "image is NULL");
  const auto* p = static_cast<const uint8_t*>(image);
  ByteView open(p, max_size);
  if (FatbinContainer::has_magic(open)) return discover_fatbin(open);
  if (OffloadBundle::has_magic(open) || CompressedBundle::has_magic(open)) return discover_bundle_in_memory(open);
  if (ElfFile::is_elf(open)) {
    Expected<ElfFile> elf = ElfFile::create(open);
    if (!elf) return elf.error();
    ByteView bytes(p, elf->extent());
    if (Expected<ContainerSite> site = discover_device_elf(bytes)) return site;
    return one_image(bytes, classify_elf(bytes));  // another machine: kept, as "object"
  }
  // PTX text, NUL-terminated (its size includes the NUL, as the driver reads it)
  const void* nul = std::memchr(p, 0, max_size);
  if (!nul)
    return Error(ErrorCode::truncated, "image: no NUL terminator within " + std::to_string(max_size) + " bytes");
  return one_image(ByteView(p, static_cast<const uint8_t*>(nul) - p + 1), ImageKind::ptx);
}

}  // namespace kir
