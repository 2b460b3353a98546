// Discoverer: embedded LLVM bitcode — `.llvmbc` (-fembed-bitcode, its cc1
// command line in `.llvmcmd`), `.llvm.lto` (-ffat-lto-objects), and, by scan,
// modules held as plain data (the Proteus host JIT's private constants).
#include "kir/discover.hpp"

#include <algorithm>

#include "kir/llvm/bitcode.hpp"

namespace kir {

namespace {

Image bitcode_image(ByteView module, uint32_t index) {
  Image image;
  image.index = index;
  image.kind = ImageKind::bitcode;
  image.stored = module;
  image.file_offset = module.origin();
  image.size = module.size();
  return image;
}

}  // namespace

Expected<ContainerSite> discover_bitcode_section(ByteView data, const std::string& command) {
  Expected<std::vector<ByteView>> modules = split_bitcode(data);
  if (!modules) return modules.error();
  ContainerSite site;
  site.file_offset = data.origin();
  site.format = ContainerFormat::bitcode_section;
  site.size = data.size();
  for (ByteView module : *modules) {
    Image image = bitcode_image(module, uint32_t(site.images.size()));
    if (!command.empty()) image.strings.emplace_back("command", command);
    site.images.push_back(std::move(image));
  }
  return site;
}

Expected<ContainerSite> discover_bitcode_module(ByteView at) {
  // The magic, then top-level blocks that walk cleanly, beginning with an
  // identification or module block and including a module block.
  constexpr uint32_t kIdentificationBlock = 13, kModuleBlock = 8;
  std::vector<uint32_t> blocks;
  Expected<uint64_t> size = bitcode_module_size(at, &blocks);
  if (!size) return size.error();
  if (blocks.empty() || (blocks[0] != kIdentificationBlock && blocks[0] != kModuleBlock) ||
      std::find(blocks.begin(), blocks.end(), kModuleBlock) == blocks.end())
    return Error(ErrorCode::malformed, "bitcode without a module block");
  ContainerSite site;
  site.file_offset = at.origin();
  site.format = ContainerFormat::bitcode_section;
  site.size = *size;
  site.images.push_back(bitcode_image(at.sub(0, *size), 0));
  return site;
}

}  // namespace kir
