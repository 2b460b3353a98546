// The crash flush of the recorder (crash_flush.hpp). Everything the handler
// does is async-signal-safe: atomics, clock_gettime, nanosleep, write,
// sigaction, pthread_sigmask, syscall(gettid), raise — and the app's own handler,
// called as the kernel would have called it.
#include "crash_flush.hpp"

#include <signal.h>
#include <sys/mman.h>
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

struct sigaction previous[NSIG];         // written by install(), before the handlers are
std::atomic<bool> previous_spent[NSIG];  // an SA_RESETHAND handler of the app's ran once
std::atomic<bool> installed{false};
std::atomic<uint64_t> wait_ms{10000};
std::atomic<int> busy{0};
std::atomic<long> writer_tid{0};

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

/// Wait (bounded) until the writer holds no complete record, unless this is the writer.
void flush() {
  if (busy.load() == 0 || writer_tid.load() == thread_id()) return;
  uint64_t deadline = now_ms() + wait_ms.load();
  while (busy.load() > 0 && now_ms() < deadline) {
    timespec pause{0, 1000000};
    ::nanosleep(&pause, nullptr);
  }
  if (busy.load() > 0)
    write_text(
        "kir-record: the app crashed and the record being written did not finish in time "
        "(KIR_RECORD_CRASH_WAIT_MS); it is left out\n");
}

// sa_handler and sa_sigaction share their storage: SIG_DFL and SIG_IGN read the same through either.
bool is_default(const struct sigaction& a) { return a.sa_handler == SIG_DFL; }
bool is_ignored(const struct sigaction& a) { return a.sa_handler == SIG_IGN; }
bool is_handler(const struct sigaction& a) { return !is_default(a) && !is_ignored(a); }

/// Whether the signal comes again by itself when the handler returns: a fault
/// the kernel raised at an instruction, which runs again (as Crashpad decides
/// it, util/posix/signals.cc WillSignalReraiseAutonomously).
bool faults_again(int signal, const siginfo_t* info) {
  if (!info || info->si_code <= 0) return false;                         // kill(), raise(), abort(), sigqueue()
  if (signal == SIGBUS && info->si_code == BUS_MCEERR_AO) return false;  // asynchronous
  return signal == SIGSEGV || signal == SIGBUS || signal == SIGFPE || signal == SIGILL;
}

/// Run the app's handler `action` as the kernel would have: its own mask (and
/// the signal itself unless SA_NODEFER) blocked, with the original siginfo and
/// ucontext, so that it can recognise its fault and resume (a changed ucontext
/// takes effect as this handler returns).
void call_app_handler(int signal, siginfo_t* info, void* context, const struct sigaction& action) {
  sigset_t block = action.sa_mask, old;
  if (!(action.sa_flags & SA_NODEFER)) ::sigaddset(&block, signal);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  if (action.sa_flags & SA_NODEFER) {
    sigset_t self;
    ::sigemptyset(&self);
    ::sigaddset(&self, signal);
    ::pthread_sigmask(SIG_UNBLOCK, &self, nullptr);
  }
  if (action.sa_flags & SA_SIGINFO) action.sa_sigaction(signal, info, context);
  else action.sa_handler(signal);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

/// The default action of a fatal signal: restored, then the signal again
/// (blocked while this handler runs, it is delivered as the handler returns;
/// a fault is not raised again, it comes back by itself with its own siginfo).
void die_by_default(int signal, const siginfo_t* info) {
  struct sigaction fallback{};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(signal, &fallback, nullptr);
  if (!faults_again(signal, info)) ::raise(signal);
}

void handler(int signal, siginfo_t* info, void* context) {
  int saved_errno = errno;
  const struct sigaction& before = previous[signal];
  bool app_handler = is_handler(before) && !((before.sa_flags & SA_RESETHAND) && previous_spent[signal].exchange(true));
  if (app_handler) {
    // The app's handler decides: a fault it handles (a guard page, a JIT's
    // probe) resumes without waiting for the writer, and this handler stays.
    // (It may also leave by siglongjmp: nothing here needs undoing then.)
    call_app_handler(signal, info, context, before);
    struct sigaction now{};
    if (::sigaction(signal, nullptr, &now) == 0 && is_default(now))
      flush();  // it left the signal to the default action: the app dies as this returns
  } else if (is_ignored(before) && !faults_again(signal, info)) {
    flush();  // ignored, as the app asked (abort() goes on to the default action)
  } else {
    flush();  // the default action, or a fault the kernel would not let the app ignore
    die_by_default(signal, info);
  }
  errno = saved_errno;
}

/// This thread's alternate signal stack, made by protect_this_thread(); taken
/// down as the thread exits (unless the app replaced it by its own).
struct AlternateStack {
  void* memory = nullptr;
  size_t size = 0;
  bool checked = false;
  ~AlternateStack() {
    if (!memory) return;
    stack_t current{};
    if (::sigaltstack(nullptr, &current) != 0 || (current.ss_flags & SS_ONSTACK)) return;  // in use: leave it
    if (current.ss_sp == static_cast<char*>(memory) + page_size()) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      ::sigaltstack(&off, nullptr);
    }
    ::munmap(memory, size);
  }
  static size_t page_size() { return size_t(::sysconf(_SC_PAGESIZE)); }
};

thread_local AlternateStack alternate_stack;

}  // namespace

uint64_t wait_from_environment() {
  const char* v = std::getenv("KIR_RECORD_CRASH_WAIT_MS");
  return v && *v ? std::strtoull(v, nullptr, 10) : 10000;
}

void protect_this_thread() {
  AlternateStack& s = alternate_stack;
  if (s.checked) return;
  s.checked = true;
  stack_t old{};
  if (::sigaltstack(nullptr, &old) != 0 || !(old.ss_flags & SS_DISABLE)) return;  // the app gave it one
  // 256 KiB (touched pages only take memory: the app's handler, chained to,
  // runs on it too) and a guard page below it: a handler that overflows it
  // faults instead of writing over whatever lies there.
  const size_t page = AlternateStack::page_size(), usable = 256 * 1024;
  void* memory = ::mmap(nullptr, page + usable, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;
  ::mprotect(memory, page, PROT_NONE);
  stack_t stack{};
  stack.ss_sp = static_cast<char*>(memory) + page;
  stack.ss_size = usable;
  if (::sigaltstack(&stack, nullptr) != 0) {
    ::munmap(memory, page + usable);
    return;
  }
  s.memory = memory, s.size = page + usable;
}

bool install(uint64_t wait) {
  wait_ms = wait;
  protect_this_thread();
  if (installed.exchange(true)) return true;
  bool ok = true;
  for (int signal : kSignals) {
    struct sigaction action{};
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    // What was there before, read first: a signal on another thread as the
    // handler goes in finds it already.
    ::sigaction(signal, nullptr, &previous[signal]);
    ok &= ::sigaction(signal, &action, &previous[signal]) == 0;
  }
  return ok;
}

void writer_begin() { busy.fetch_add(1); }
void writer_thread() { writer_tid = thread_id(); }
void writer_end() { busy.fetch_sub(1); }

}  // namespace kir::record::crash
