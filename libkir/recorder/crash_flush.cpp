// The crash flush of the recorder (crash_flush.hpp). Everything the handler
// does is async-signal-safe: atomics, clock_gettime, nanosleep, write,
// sigaction, syscall(gettid), raise.
#include "crash_flush.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kir::record::crash {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};

struct sigaction previous[NSIG];
std::atomic<bool> installed{false};
std::atomic<uint64_t> wait_ms{10000};
std::atomic<int> busy{0};
std::atomic<long> writer_tid{0};
alignas(16) char alternate_stack[64 * 1024];

long thread_id() { return ::syscall(SYS_gettid); }

uint64_t now_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000 + uint64_t(t.tv_nsec) / 1000000;
}

void write_text(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void handler(int signal, siginfo_t*, void*) {
  int saved_errno = errno;
  if (busy.load() > 0 && writer_tid.load() != thread_id()) {
    uint64_t deadline = now_ms() + wait_ms.load();
    while (busy.load() > 0 && now_ms() < deadline) {
      timespec pause{0, 1000000};
      ::nanosleep(&pause, nullptr);
    }
    if (busy.load() > 0)
      write_text("kir-record: the app crashed and the record being written did not finish in time "
                 "(KIR_RECORD_CRASH_WAIT_MS); it is left out\n");
  }
  // The disposition the signal had before install(), then the signal again:
  // blocked while this handler runs, it is delivered as the handler returns
  // (a fault that returns re-faults, and meets the same disposition).
  ::sigaction(signal, &previous[signal], nullptr);
  ::raise(signal);
  errno = saved_errno;
}

}  // namespace

uint64_t wait_from_environment() {
  const char* v = std::getenv("KIR_RECORD_CRASH_WAIT_MS");
  return v && *v ? std::strtoull(v, nullptr, 10) : 10000;
}

bool install(uint64_t wait) {
  wait_ms = wait;
  if (installed.exchange(true)) return true;
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof alternate_stack;
  stack_t old{};
  if (::sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) ::sigaltstack(&stack, nullptr);
  bool ok = true;
  for (int signal : kSignals) {
    struct sigaction action {};
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ok &= ::sigaction(signal, &action, &previous[signal]) == 0;
  }
  return ok;
}

void writer_begin() { busy.fetch_add(1); }
void writer_thread() { writer_tid = thread_id(); }
void writer_end() { busy.fetch_sub(1); }

}  // namespace kir::record::crash
