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

/// The magic, then top-level blocks that walk cleanly, beginning with an
/// identification or module block and including a module block.
bool is_module(const std::vector<uint32_t>& blocks) {
  constexpr uint32_t kIdentificationBlock = 13, kModuleBlock = 8;
  return !blocks.empty() && (blocks[0] == kIdentificationBlock || blocks[0] == kModuleBlock) &&
         std::find(blocks.begin(), blocks.end(), kModuleBlock) != blocks.end();
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
  std::vector<uint32_t> blocks;
  Expected<uint64_t> size = bitcode_module_size(at, &blocks);
  if (!size) return size.error();
  if (!is_module(blocks)) return Error(ErrorCode::malformed, "bitcode without a module block");
  ContainerSite site;
  site.file_offset = at.origin();
  site.format = ContainerFormat::bitcode_section;
  site.size = *size;
  site.images.push_back(bitcode_image(at.sub(0, *size), 0));
  return site;
}

Expected<ContainerSite> discover_bitcode_file(ByteView bytes) {
  Expected<ContainerSite> site = discover_bitcode_section(bytes);
  if (!site) return site.error();
  if (site->images.empty())
    return Error(ErrorCode::truncated, "bitcode file holds no module (only zero padding)", bytes.origin(0));
  for (const Image& image : site->images) {
    Expected<std::vector<uint32_t>> blocks = bitcode_blocks(image.stored);
    if (!blocks) return blocks.error();
    if (!is_module(*blocks))
      return Error(ErrorCode::malformed,
                   "bitcode module at offset " + hex(image.stored.origin()) + " has no module block (" +
                       std::to_string(blocks->size()) + " top-level blocks)",
                   image.stored.origin());
  }
  return site;
}

}  // namespace kir
