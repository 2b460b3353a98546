// The hook layer's clients: the table of their callbacks (append-only, read by
// events without a lock), what the launch path must compute for them, the
// launch override's dispatch, and when each hears of a completed launch. One
// lock, between clients being added. ClientLoader loads the KIR_HOOK_CLIENTS ones.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "kir/hooks.h"

namespace kir::hook {

/// How the interposing runtime waits for a launch (cudaStreamSynchronize and
/// cudaLaunchHostFunc, or their driver/HIP twins), for clients that want
/// launch_completed once the kernel is done.
struct StreamOps {
  int (*synchronize)(void* stream);
  int (*enqueue_host)(void* stream, void (*fn)(void*), void* data);
};

class ClientTable {
 public:
  static constexpr size_t kMaxClients = 16;
  /// What some client reads of a launch event (from kir_hook_client.launch_skips, API 5).
  static constexpr uint32_t kNeedsKernel = 1, kNeedsIdentity = 2, kNeedsDevice = 4;
  enum class Added { added, null, too_small, too_new, full };

  /// Add `client` (the fields its struct_size covers; the rest zero). On `added`,
  /// `*slot` is the layer's copy.
  Added add(const kir_hook_client* client, const kir_hook_client** slot = nullptr);
  /// Why add() refused `client` (a failure line's detail).
  static std::string refusal(Added why, const kir_hook_client* client);

  template <class Fn>
  void each(Fn&& fn) const {
    size_t n = count_.load(std::memory_order_acquire);  // usually 0: nothing to do
    for (size_t i = 0; i < n; ++i) fn(clients_[i]);
  }
  /// Whether any client listens: without one, launches need no kernel lookup.
  bool any() const { return count_.load(std::memory_order_acquire) != 0; }
  /// Whether any client has a launch_override (a relaxed load: the hot path's only cost).
  bool overriding() const { return has_override_.load(std::memory_order_relaxed); }
  /// kNeeds* of every client, or'ed.
  uint32_t needs() const { return needs_.load(std::memory_order_acquire); }

  /// The client at `index` (the layer's copy; fields past its struct_size zero).
  const kir_hook_client& at(size_t index) const { return clients_[index]; }

  /// Ask the overriding clients in order; the first that claims `launch` fills
  /// `sub` and is returned (its index), else -1.
  int claim(const kir_hook_launch& launch, kir_hook_substitute& sub) const;
  /// Tell clients the launch is done, each when its `completion` asks (with `ops`;
  /// without them, or for a failed launch, at once).
  void completed(const kir_hook_launch& launch, const StreamOps* ops) const;

 private:
  // Append-only: a client is written, then published by the count (release), so
  // events read the first count_ entries without a lock or a copy.
  std::mutex mutex_;  // between clients being added
  std::array<kir_hook_client, kMaxClients> clients_{};
  std::atomic<size_t> count_{0};
  std::atomic<bool> has_override_{false};
  std::atomic<uint32_t> needs_{0};
};

/// Loads the clients KIR_HOOK_CLIENTS names, once. Layer::get() calls it after
/// the layer exists, never inside the static's initialization: loading a client
/// (dlopen) can run this library's own constructors — when the layer is first
/// entered before them, from an earlier library's constructor — and the
/// tracing client's (trace_client.cpp) enters the layer again. The loading
/// thread goes on with the layer as it is; another thread waits for the clients.
class ClientLoader {
 public:
  bool loaded() const { return loaded_.load(std::memory_order_acquire); }
  /// `add(path, client)` adds each library's client and reports a refusal.
  template <class Add>
  void load(Add&& add) {
    static thread_local bool loading = false;  // this thread is loading them: entered again from a dlopen
    if (loading) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (loaded_.load(std::memory_order_relaxed)) return;  // another thread loaded them meanwhile
    loading = true;
    for_each_library(
        [](void* add, const std::string& path, const kir_hook_client* c) { (*static_cast<Add*>(add))(path, c); }, &add);
    loading = false;
    loaded_.store(true, std::memory_order_release);
  }

 private:
  /// dlopen each KIR_HOOK_CLIENTS library and call `add` with its client
  /// (a library that cannot be loaded is reported, always, and skipped).
  static void for_each_library(void (*add)(void*, const std::string&, const kir_hook_client*), void* user);

  std::mutex mutex_;  // held while the clients load
  std::atomic<bool> loaded_{false};
};

}  // namespace kir::hook
