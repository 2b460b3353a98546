// Settings from the environment for the hook layer and its clients (the
// tracing client, the recorder): every KIR_* variable is read through
// kir::hook::setting(), never getenv.
//
// In a secure-execution process (setuid or setgid, or with file capabilities:
// the kernel sets AT_SECURE) the environment belongs to the less privileged
// user who started it, so nothing from it is honoured: no client library from
// KIR_HOOK_CLIENTS is loaded and every KIR_* setting reads as unset. The first
// ignored variable is said once on stderr.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>

// <sys/auxv.h> would bring <elf.h>'s macros (SHT_NULL, PT_LOAD...), which clash
// with kir/object/elf.hpp's constants: declare the one function it gives.
extern "C" unsigned long getauxval(unsigned long type) noexcept;

namespace kir::hook {

inline constexpr unsigned long kAtSecure = 23;  // AT_SECURE in <elf.h>

/// Whether the kernel started this process in secure-execution mode (AT_SECURE).
inline bool secure_execution() { return getauxval(kAtSecure) != 0; }

/// The KIR_* setting `name` (or another variable the hook or a client reads), or
/// nullptr when unset — or ignored because the process runs in secure mode.
inline const char* setting(const char* name) {
  if (!secure_execution()) return secure_getenv(name);
  static std::atomic<bool> said{false};
  if (std::getenv(name) && !said.exchange(true))  // only whether it is set: its value is not used
    std::fprintf(stderr,
                 "kir-hook: setuid/setgid process (AT_SECURE): %s and the other KIR_* settings and hook "
                 "clients from the environment are ignored\n",
                 name);
  return nullptr;
}

}  // namespace kir::hook
