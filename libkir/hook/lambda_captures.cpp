// The Proteus ABI's lambda captures (lambda_captures.hpp).
#include "lambda_captures.hpp"

#include <algorithm>
#include <cstring>

#include "failure_log.hpp"
#include "kernel_code.hpp"
#include "kir/llvm/bitcode.hpp"
#include "kir/support/demangle.hpp"

namespace kir::hook {

namespace {

/// The lambda type whose call operator `function` (mangled) is: what precedes
/// "::operator()" in its demangled name, as Proteus's
/// LambdaRegistry::matchJitVariableMap takes it; empty for another function.
std::string lambda_type_of(const std::string& function) {
  std::string demangled = demangle(function);
  size_t at = demangled.rfind("::operator()");
  return at == std::string::npos ? std::string() : demangled.substr(0, at);
}

}  // namespace

LambdaCaptures& LambdaCaptures::get() {
  static LambdaCaptures* captures = new LambdaCaptures();  // never destroyed: the app may call in during exit
  return *captures;
}

void LambdaCaptures::variable(const char* lambda, uint8_t type, uint32_t slot, uint32_t offset, const void* value,
                              size_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_name_.find(lambda);
  Lambda* l = it != by_name_.end() ? it->second : by_name_[lambda] = &lambdas_.emplace_back(Lambda{lambda, {}, {}});
  const auto* bytes = static_cast<const uint8_t*>(value);
  l->pending.push_back({type, slot, offset, std::vector<uint8_t>(bytes, bytes + size)});
  any_.store(true, std::memory_order_release);
}

void LambdaCaptures::lambda(const char* lambda) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_name_.find(lambda);
  if (it == by_name_.end() || it->second->pending.empty()) return;  // unchanged: the values stay current
  Lambda& l = *it->second;
  std::string key = l.name + '\0';
  for (const Value& v : l.pending) {
    uint32_t head[4] = {v.type, v.slot, v.offset, uint32_t(v.bytes.size())};
    key.append(reinterpret_cast<const char*>(head), sizeof head);
    key.append(v.bytes.begin(), v.bytes.end());
  }
  std::unique_ptr<Snapshot>& s = snapshots_[key];
  if (!s) {
    s = std::make_unique<Snapshot>();
    for (const Value& v : l.pending) s->bytes.insert(s->bytes.end(), v.bytes.begin(), v.bytes.end());
    size_t at = 0;
    for (const Value& v : l.pending) {
      s->records.push_back({l.name.c_str(), v.slot, v.offset, v.type, s->bytes.data() + at, v.bytes.size()});
      at += v.bytes.size();
    }
  }
  l.current = s.get();
  l.pending.clear();
}

LambdaCaptures::Callees LambdaCaptures::callees_of(Registry& registry, const kir_hook_kernel* kernel) {
  Callees c;
  c.demangled = demangle(kernel->name ? kernel->name : "");
  for (size_t i = 0, n = kernel_ir_count(registry, kernel); i < n; ++i) {
    kir_bytes ir{};
    if (!kernel_ir(registry, kernel, i, ir)) continue;
    Expected<std::vector<ByteView>> modules = split_bitcode(ByteView(static_cast<const uint8_t*>(ir.data), ir.size));
    if (!modules) {
      report_failure(Failure::jit_args, std::string("kernel ") + kernel->name,
                     "its IR module " + std::to_string(i) + " (for its lambdas' captures): ", modules.error());
      continue;
    }
    for (ByteView m : *modules) {
      Expected<std::vector<std::string>> names = bitcode_function_names(m);
      if (!names) {
        report_failure(Failure::jit_args, std::string("kernel ") + kernel->name,
                       "its IR module " + std::to_string(i) + " (for its lambdas' captures): ", names.error());
        continue;
      }
      for (const std::string& f : *names)
        if (std::string type = lambda_type_of(f); !type.empty()) c.types.push_back(std::move(type));
    }
  }
  std::sort(c.types.begin(), c.types.end());
  c.types.erase(std::unique(c.types.begin(), c.types.end()), c.types.end());
  return c;
}

size_t LambdaCaptures::of_kernel(Registry& registry, const kir_hook_kernel* kernel, kir_jit_capture* out,
                                 size_t capacity) {
  if (!kernel || __atomic_load_n(&kernel->unloaded, __ATOMIC_ACQUIRE)) return 0;
  if (!any_.load(std::memory_order_acquire)) return 0;  // no lambda registered: nothing to match (Proteus's LR.empty())
  std::shared_ptr<const Callees> callees;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = callees_.find(kernel);
    if (it != callees_.end()) callees = it->second;
  }
  if (!callees) {  // read once per kernel, outside the lock (its IR is parsed)
    auto read = std::make_shared<const Callees>(callees_of(registry, kernel));
    std::lock_guard<std::mutex> lock(mutex_);
    callees = callees_.try_emplace(kernel, std::move(read)).first->second;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const Lambda& l : lambdas_) {
    if (!l.current) continue;
    bool called = std::binary_search(callees->types.begin(), callees->types.end(), l.name) ||
                  callees->demangled.find(l.name) != std::string::npos;
    if (!called) continue;
    for (const kir_jit_capture& r : l.current->records) {
      if (out && n < capacity) out[n] = r;
      ++n;
    }
  }
  return n;
}

}  // namespace kir::hook
