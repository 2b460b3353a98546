// The hook layer's clients (client_table.hpp).
#include "client_table.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "failure_log.hpp"
#include "kir_hook_internal/settings.hpp"

namespace kir::hook {

namespace {

/// What the launch path must compute for `c` (API 5; older clients: everything).
uint32_t launch_needs(const kir_hook_client& c, uint32_t struct_size) {
  uint32_t skips = struct_size < offsetof(kir_hook_client, launch_skips) + sizeof(uint32_t) ? 0u : c.launch_skips;
  if (skips & KIR_HOOK_SKIP_KERNEL) skips |= KIR_HOOK_SKIP_IDENTITY;
  uint32_t needs = 0;
  if (!(skips & KIR_HOOK_SKIP_KERNEL)) needs |= ClientTable::kNeedsKernel;
  if (!(skips & KIR_HOOK_SKIP_IDENTITY)) needs |= ClientTable::kNeedsIdentity;
  // API 7: the device fields lie past an older client's kir_hook_launch: only an API-7 client reads them.
  if (c.api_version >= 7 && !(skips & KIR_HOOK_SKIP_DEVICE)) needs |= ClientTable::kNeedsDevice;
  if (!c.launch_begin && !c.launch_completed && !c.launch_override) needs = 0;  // never sees a launch
  return needs;
}

}  // namespace

ClientTable::Added ClientTable::add(const kir_hook_client* client, const kir_hook_client** added) {
  if (!client) return Added::null;
  if (client->struct_size < offsetof(kir_hook_client, fatbin_registered)) return Added::too_small;
  if (client->api_version > KIR_HOOK_API_VERSION) return Added::too_new;
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = count_.load(std::memory_order_relaxed);
  if (n == kMaxClients) return Added::full;
  kir_hook_client& slot = clients_[n];  // fields a smaller (older) struct lacks stay zero
  std::memcpy(&slot, client, std::min<size_t>(client->struct_size, sizeof slot));
  count_.store(n + 1, std::memory_order_release);
  if (slot.launch_override) has_override_.store(true, std::memory_order_release);
  needs_.fetch_or(launch_needs(slot, client->struct_size), std::memory_order_release);
  if (added) *added = &slot;
  return Added::added;
}

std::string ClientTable::refusal(Added why, const kir_hook_client* client) {
  switch (why) {
    case Added::null: return "kir_hook_client_entry returned NULL";
    case Added::too_small: return "struct_size " + std::to_string(client->struct_size) + " is too small";
    case Added::too_new:
      return "built for hook API " + std::to_string(client->api_version) + ", newer than this layer's " +
             std::to_string(KIR_HOOK_API_VERSION) + ": not added (use a kir at least as new as the client)";
    case Added::full: return "the client table is full (" + std::to_string(kMaxClients) + " clients)";
    case Added::added: break;
  }
  return "";
}

int ClientTable::claim(const kir_hook_launch& launch, kir_hook_substitute& out) const {
  size_t n = count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const kir_hook_client& c = clients_[i];
    if (!c.launch_override) continue;
    kir_hook_substitute sub{};
    sub.struct_size = sizeof sub;
    if (c.launch_override(c.user, &launch, &sub) != 1) continue;
    out = sub;
    return int(i);  // the first claimer wins
  }
  return -1;
}

namespace {

/// A launch event kept until its stream reaches it: the client, the event, and
/// copies of the argument bytes (the app's own may be gone by then).
struct PendingCompletion {
  kir_hook_client client;
  kir_hook_launch launch;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<void*> args;

  PendingCompletion(const kir_hook_client& c, const kir_hook_launch& l) : client(c), launch(l) {
    const kir_hook_kernel* k = l.kernel;
    if (!k || !l.args) {
      launch.args = nullptr;
      return;
    }
    for (uint32_t i = 0; i < k->param_count; ++i) {
      const auto* from = static_cast<const uint8_t*>(l.args[i]);
      bytes.emplace_back(from, from + k->param_sizes[i]);
    }
    for (std::vector<uint8_t>& b : bytes) args.push_back(b.data());
    launch.args = args.data();
  }

  static void run(void* self) {
    std::unique_ptr<PendingCompletion> p(static_cast<PendingCompletion*>(self));
    p->client.launch_completed(p->client.user, &p->launch);
  }
};

}  // namespace

void ClientTable::completed(const kir_hook_launch& launch, const StreamOps* ops) const {
  bool synchronized = false;
  void* stream = const_cast<void*>(launch.stream);
  each([&](const kir_hook_client& c) {
    if (!c.launch_completed) return;
    int when = launch.result == 0 && ops ? c.completion : KIR_COMPLETION_RETURNED;
    if (when == KIR_COMPLETION_SYNCHRONIZE && !synchronized) {
      ops->synchronize(stream);
      synchronized = true;
    }
    if (when == KIR_COMPLETION_STREAM_ORDERED) {
      auto pending = std::make_unique<PendingCompletion>(c, launch);
      if (ops->enqueue_host(stream, &PendingCompletion::run, pending.get()) == 0) {
        pending.release();  // run() owns it now
        return;
      }
      ops->synchronize(stream);  // could not enqueue: wait instead, and report now
    }
    c.launch_completed(c.user, &launch);
  });
}

void ClientLoader::for_each_library(void (*add)(void*, const std::string&, const kir_hook_client*), void* user) {
  const char* list = setting("KIR_HOOK_CLIENTS");  // nullptr in a setuid process: no clients
  if (!list) return;
  std::string all(list);
  for (size_t start = 0; start <= all.size();) {
    size_t end = all.find(':', start);
    std::string path = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? all.size() + 1 : end + 1;
    if (path.empty()) continue;
    // Printed whether or not KIR_HOOK_LOG is set: the user asked for this client.
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto entry = lib ? reinterpret_cast<const kir_hook_client* (*)()>(dlsym(lib, "kir_hook_client_entry")) : nullptr;
    if (!entry) {
      report_failure(Failure::client, "client " + path, lib ? "no kir_hook_client_entry symbol" : dlerror(), true);
      continue;
    }
    add(user, path, entry());
  }
}

}  // namespace kir::hook
