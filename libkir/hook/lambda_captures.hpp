// The Proteus ABI's lambda captures (kir_hook_kernel_captures, hooks.h API 7):
// the values `proteus::jit_variable` registers for a lambda type, published by
// its `proteus::register_lambda` (include/proteus/JitInterface.h), and which
// kernels call which lambdas. Kept as Proteus's LambdaRegistry keeps them
// (src/include/proteus/impl/LambdaRegistry.h): values pending per lambda type
// until its register_lambda, which makes them current when there are any.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kir/hooks.h"
#include "registry.hpp"

namespace kir::hook {

class LambdaCaptures {
 public:
  static LambdaCaptures& get();

  /// __proteus_register_variable: a value (`size` bytes of kir_arg_type `type`) captured
  /// by lambda type `lambda` in slot `slot` at byte `offset` of its closure; pending.
  void variable(const char* lambda, uint8_t type, uint32_t slot, uint32_t offset, const void* value, size_t size);
  /// __proteus_register_lambda: `lambda`'s pending values, when there are any, become its current ones.
  void lambda(const char* lambda);
  /// kir_hook_kernel_captures: the current captures of the lambdas `kernel` calls.
  size_t of_kernel(Registry& registry, const kir_hook_kernel* kernel, kir_jit_capture* out, size_t capacity);

 private:
  struct Value {
    uint8_t type;
    uint32_t slot, offset;
    std::vector<uint8_t> bytes;
  };
  /// One lambda's values as published, interned: never freed (records point into it).
  struct Snapshot {
    std::vector<uint8_t> bytes;
    std::vector<kir_jit_capture> records;
  };
  struct Lambda {
    std::string name;  // the demangled lambda type, as the pass wrote it
    std::vector<Value> pending;
    const Snapshot* current = nullptr;
  };
  /// The lambda types a kernel calls, by its IR's functions, and its demangled name.
  struct Callees {
    std::vector<std::string> types;
    std::string demangled;
  };
  Callees callees_of(Registry& registry, const kir_hook_kernel* kernel);

  std::atomic<bool> any_{false};  // a lambda was registered: until then a query takes no lock (the launch path)
  std::mutex mutex_;
  std::deque<Lambda> lambdas_;  // in the order first seen; never freed (records point at names)
  std::unordered_map<std::string, Lambda*> by_name_;
  std::unordered_map<std::string, std::unique_ptr<Snapshot>> snapshots_;  // by their encoding
  std::unordered_map<const kir_hook_kernel*, std::shared_ptr<const Callees>> callees_;
};

}  // namespace kir::hook
