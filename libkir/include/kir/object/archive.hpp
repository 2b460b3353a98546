// Unix `ar` archives (static libraries, `.a`), GNU and BSD variants.
//
// Layout: "!<arch>\n", then members, each a 60-byte header followed by its
// data padded to an even offset:
//   0  name[16]   "foo.o/" (GNU), "/123" (offset into the "//" long-name
//                 member), "#1/N" (BSD: the name is the first N data bytes)
//   16 mtime[12] 28 uid[6] 34 gid[6] 40 mode[8]
//   48 size[10]   decimal
//   58 "`\n"
// The symbol index members ("/", "/SYM64/", "__.SYMDEF") and the long-name
// table ("//") are not reported as members.
#pragma once

#include <string>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

struct ArchiveMember {
  std::string name;
  uint64_t header_offset = 0;  // file offset of the member header
  ByteView data;               // the member's bytes (origin = file offset)
};

class Archive {
 public:
  static bool is_archive(ByteView bytes) { return bytes.starts_with("!<arch>\n"); }
  static Expected<Archive> create(ByteView bytes);

  const std::vector<ArchiveMember>& members() const { return members_; }

 private:
  Archive() = default;
  std::vector<ArchiveMember> members_;
};

}  // namespace kir
