// The layer's failure log: why it could not use something it was handed
// (kir/hooks.h "Errors"). Each failure is counted, by kind
// (kir_hook_stats.failures is their sum), and one that is libkir's own error (a
// registration or image it could not parse) also by that error's ErrorCode
// (kir_hook_failure_count); with KIR_HOOK_LOG=1 one line on stderr
// each (KIR_HOOK_LOG=PATH: appended to PATH): "kir-hook: error: WHAT: DETAIL".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kir/support/error.hpp"

namespace kir::hook {

/// What kind of thing failed: the key a failure is counted under.
enum class Failure : uint8_t {
  client,        // a KIR_HOOK_CLIENTS library that cannot be loaded or added
  client_api,    // a client built against a newer hook API than this layer's
  registration,  // a fatbin, bundle or module registered without readable code
  image,         // none of its images could be chosen, decoded or parsed
  kernel,        // a kernel whose registration or layout is unknown
  handle,        // an unregistration of a handle the layer never saw
  code,          // kir_hook_kernel_code(_unit): an image that cannot be decoded
  substitute,    // a claimed substitute that cannot be launched
  jit_args,      // a Proteus runtime-constant description kir cannot keep
  allocation,    // kir_hook_track_allocation with an unknown kind
};
inline constexpr size_t kFailureKinds = size_t(Failure::allocation) + 1;

/// Count a failure of kind `kind` and, with KIR_HOOK_LOG, print its line.
/// `always`: printed even without KIR_HOOK_LOG (a client the user named cannot be loaded).
void report_failure(Failure kind, const std::string& what, const std::string& detail, bool always = false);
/// The same for libkir's `error`: DETAIL is `context` + its message; also counted under its code.
void report_failure(Failure kind, const std::string& what, const std::string& context, const Error& error);
/// All failures so far, those of one kind, or those that were libkir errors of `code`.
uint64_t failure_count();
uint64_t failure_count(Failure kind);
uint64_t failure_count(ErrorCode code);
/// "fatbin 0x55d0c0a0" — how failure lines name a registration handle.
std::string describe(const char* noun, const void* handle);

}  // namespace kir::hook
