// Counters that every launch adds to, without a locked instruction per launch
// (issue 15: each `lock add` on a shared counter cost the launch path several
// nanoseconds). Each thread adds to its own block with a plain load and store;
// a read sums the blocks. A thread that exits hands its block (and its counts,
// which stay in the sum) to the next new thread, so a process that starts many
// threads keeps as many blocks as it ever ran at once.
//
// One set of counters per Tag (the hook layer has one, the JIT client another).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#ifndef KIR_TLS_INITIAL_EXEC
#define KIR_TLS_INITIAL_EXEC __attribute__((tls_model("initial-exec")))
#endif

namespace kir::hook {

template <class Tag, size_t N>
class ThreadCounters {
 public:
  /// Add `n` to counter `i` for the calling thread; returns the thread's new count.
  static uint64_t add(size_t i, uint64_t n = 1) {
    Block* b = current_;
    if (__builtin_expect(reinterpret_cast<uintptr_t>(b) > kRetired, 1)) {  // neither none yet nor retired
      uint64_t v = b->value[i].load(std::memory_order_relaxed) + n;
      b->value[i].store(v, std::memory_order_relaxed);  // only this thread writes its block
      return v;
    }
    return add_slow(i, n);
  }

  /// Counter `i` summed over every thread that ever added to it.
  static uint64_t sum(size_t i) {
    uint64_t total = shared().value[i].load(std::memory_order_relaxed);
    for (Block* b = all().load(std::memory_order_acquire); b; b = b->next_all)
      total += b->value[i].load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct alignas(64) Block {
    std::atomic<uint64_t> value[N] = {};
    Block* next_all = nullptr;   ///< every block ever made (never freed)
    Block* next_free = nullptr;  ///< blocks of threads that exited
  };

  /// Gives the thread's block back when the thread exits.
  struct Owner {
    Block* block = nullptr;
    ~Owner() {
      if (!block) return;
      current_ =
          reinterpret_cast<Block*>(kRetired);  // a count after this (the thread's last destructors) adds to shared()
      std::lock_guard<std::mutex> lock(free_mutex());
      block->next_free = free_list();
      free_list() = block;
    }
  };

  static uint64_t add_slow(size_t i, uint64_t n) {
    if (reinterpret_cast<uintptr_t>(current_) == kRetired)
      return shared().value[i].fetch_add(n, std::memory_order_relaxed) + n;
    Block* b = nullptr;
    {
      std::lock_guard<std::mutex> lock(free_mutex());
      if ((b = free_list())) free_list() = b->next_free;
    }
    if (!b) {
      b = new Block();  // lives as long as the process (its counts stay in the sums)
      b->next_all = all().load(std::memory_order_relaxed);
      while (!all().compare_exchange_weak(b->next_all, b, std::memory_order_release, std::memory_order_relaxed)) {
      }
    }
    thread_local Owner owner;  // constructed here, on the thread's first count
    owner.block = b;
    current_ = b;
    return add(i, n);
  }

  // Function-local statics: usable from any library constructor or destructor.
  static Block& shared() {
    static Block* b = new Block();  // never destroyed: launches may come during exit
    return *b;
  }
  static std::atomic<Block*>& all() {
    static std::atomic<Block*> head{nullptr};
    return head;
  }
  static std::mutex& free_mutex() {
    static std::mutex* m = new std::mutex();
    return *m;
  }
  static Block*& free_list() {
    static Block* head = nullptr;
    return head;
  }

  static constexpr uintptr_t kRetired = 1;  ///< current_ of a thread whose Owner was destroyed
  /// The thread's block: trivial (no TLS initializer on the hot path) and in the
  /// static TLS block (one %fs-relative load, not a __tls_get_addr call: 8 bytes,
  /// which glibc's surplus holds even when the library is dlopen()ed).
  static thread_local Block* current_ KIR_TLS_INITIAL_EXEC;
};

template <class Tag, size_t N>
thread_local typename ThreadCounters<Tag, N>::Block* ThreadCounters<Tag, N>::current_ KIR_TLS_INITIAL_EXEC = nullptr;

}  // namespace kir::hook
