// Marks the calling thread as inside an interposed runtime call.
#pragma once

#include "kir_hook_internal/thread_counters.hpp"  // KIR_TLS_INITIAL_EXEC

namespace kir::hook {

/// Marks the calling thread as inside an interposed runtime call, whose own
/// driver calls (cuLaunchKernel, cuMemAlloc ...) are therefore not reported again.
class RuntimeCall {
 public:
  RuntimeCall() { ++depth(); }
  ~RuntimeCall() { --depth(); }
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    static thread_local int d KIR_TLS_INITIAL_EXEC = 0;  // static TLS: no __tls_get_addr per launch
    return d;
  }
};

}  // namespace kir::hook
