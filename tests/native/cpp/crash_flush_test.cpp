// The recorder's crash flush (libkir/recorder/crash_flush.hpp) without a GPU:
// records are written as libkir_record.so writes them — the writer thread
// bracketed by writer_begin()/writer_end() — and the process then dies of a
// signal (tests/record/test_record_crash_cpu.py runs it and reads the recording).
//
//   kir_crash_flush_test DIR MODE
//
// Record "complete-1" is written before the crash; record "complete-2" is
// handed to a writer thread that needs 300 ms to store it (the crash comes
// while it works: the handler must wait for it); record "in-flight" is being
// built when the crash comes and is never handed over (it must be absent).
// MODE: segv (a NULL store), bus, fpe, ill (raise), abort, terminate (an
// uncaught exception), stuck (SIGSEGV while the writer never finishes: the
// handler gives up after KIR_RECORD_CRASH_WAIT_MS), exit-thread (exit(3) from
// another thread while the writer works: the exit handler joins it),
// writer-segv (the writer itself faults: its handler must not wait for itself),
// overflow (the main thread's stack overflows: the handler runs on the
// alternate stack), overflow-thread (so does another thread's, which called
// crash::protect_this_thread() as a recording thread does), chain (SIGSEGV,
// with an SA_SIGINFO handler the app installed before: it gets the fault's own
// siginfo, prints it and ends the process with status 42, not waiting),
// resethand (an SA_RESETHAND handler of the app's makes one guard page
// writable; the next guard page faults into the default action, after the
// flush), ignored (SIGFPE ignored before: raise(SIGFPE) returns; SIGSEGV
// ignored: a store through NULL still dies, after the flush), mask and
// mask-nodefer (the app's handler, sa_mask {SIGUSR1}, without or with
// SA_NODEFER, says which of SIGSEGV and SIGUSR1 it runs with blocked, makes
// the guard page writable, and the program exits 0).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../libkir/recorder/crash_flush.hpp"
#include "kir/record/record_builder.hpp"

using namespace kir;
using namespace kir::record;

namespace {

std::unique_ptr<RecordBuilder> build(ChunkStore& store, const std::string& name, uint64_t seed) {
  auto b = std::make_unique<RecordBuilder>(store, 4096);
  b->set_process(::getpid(), -1);
  b->set_device("no device", "sm_90", 0);
  b->set_kernel(name, name, Hash128{seed, 1}, {0}, {8});
  uint64_t pointer = 0x10000;
  std::vector<uint8_t> arg(8);
  std::memcpy(arg.data(), &pointer, 8);
  b->set_launch("cuLaunchKernel", Hash128{seed, 2}, {1, 1, 1}, {32, 1, 1}, 0, 0, {arg}, 0);
  size_t region = b->add_allocation(pointer, 10000, "device", true);
  std::vector<uint8_t> before(10000), after(10000);
  for (size_t i = 0; i < before.size(); ++i) before[i] = uint8_t(i * seed), after[i] = uint8_t(i * seed + 1);
  if (!b->snapshot(region, false, 0, ByteView(before.data(), before.size())) ||
      !b->snapshot(region, true, 0, ByteView(after.data(), after.size()))) {
    std::fprintf(stderr, "snapshot failed\n");
    std::exit(2);
  }
  return b;
}

void write(RecordBuilder& b) {
  Expected<std::string> path = b.write();
  if (!path) {
    std::fprintf(stderr, "write failed: %s\n", path.error().message().c_str());
    std::exit(2);
  }
}

/// Recursion without end, each frame 4 KiB of stack the compiler cannot drop.
__attribute__((noinline)) uint64_t descend(uint64_t depth, uint64_t limit) {
  volatile char frame[4096];
  frame[depth % sizeof frame] = char(depth);
  if (depth == limit) return frame[0];
  return descend(depth + 1, limit) + frame[depth % sizeof frame];
}

void say(const char* text) {
  ssize_t ignored = ::write(STDOUT_FILENO, text, std::strlen(text));
  (void)ignored;
}

void app_handler(int, siginfo_t* info, void*) {
  char text[128];
  std::snprintf(text, sizeof text, "app handler: code %d, address %p\n", info->si_code, info->si_addr);
  say(text);
  ::_exit(42);
}

char* guard_page = nullptr;  // PROT_NONE until an app handler makes it writable

void open_guard_page(int, siginfo_t*, void*) {
  say("app handler: guard page\n");
  ::mprotect(guard_page, 4096, PROT_READ | PROT_WRITE);
}

void report_mask(int, siginfo_t*, void*) {
  sigset_t now;
  ::sigprocmask(SIG_BLOCK, nullptr, &now);
  char text[128];
  std::snprintf(text, sizeof text, "app handler: SIGSEGV blocked %d, SIGUSR1 blocked %d\n",
                ::sigismember(&now, SIGSEGV), ::sigismember(&now, SIGUSR1));
  say(text);
  ::mprotect(guard_page, 4096, PROT_READ | PROT_WRITE);
}

/// The app's SIGSEGV handler, installed before crash::install() as an app that
/// loads CUDA later does.
void install_app_handler(void (*handler)(int, siginfo_t*, void*), int flags) {
  struct sigaction action {};
  action.sa_sigaction = handler;
  action.sa_flags = SA_SIGINFO | flags;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGUSR1);
  ::sigaction(SIGSEGV, &action, nullptr);
}

void touch_guard_page(int page) { static_cast<volatile char*>(guard_page)[page * 4096] = 1; }

std::thread writer;

void die_as(const std::string& mode) {
  std::printf("crashing: %s\n", mode.c_str());
  std::fflush(stdout);
  if (mode == "segv" || mode == "stuck") *static_cast<volatile int*>(nullptr) = 1;
  if (mode == "bus") ::raise(SIGBUS);
  if (mode == "fpe") ::raise(SIGFPE);
  if (mode == "ill") ::raise(SIGILL);
  if (mode == "overflow") std::printf("%lu\n", static_cast<unsigned long>(descend(0, ~uint64_t(0))));
  if (mode == "chain") *static_cast<volatile int*>(nullptr) = 1;
  if (mode == "overflow-thread")
    std::thread([] {
      crash::protect_this_thread();
      std::printf("%lu\n", static_cast<unsigned long>(descend(0, ~uint64_t(0))));
    }).join();
  if (mode == "resethand") {
    touch_guard_page(0);
    touch_guard_page(1);
  }
  if (mode == "ignored") {
    ::raise(SIGFPE);
    say("SIGFPE ignored\n");
    *static_cast<volatile int*>(nullptr) = 1;
  }
  if (mode == "mask" || mode == "mask-nodefer") {
    touch_guard_page(0);
    writer.join();
    std::exit(0);
  }
  if (mode == "abort") std::abort();
  if (mode == "terminate") throw std::runtime_error("nobody catches this");
  if (mode == "exit-thread") {
    std::thread([] { std::exit(3); }).join();
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kir_crash_flush_test DIR MODE\n");
    return 2;
  }
  std::string mode = argv[2];
  guard_page = static_cast<char*>(::mmap(nullptr, 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mode == "chain") install_app_handler(app_handler, 0);
  if (mode == "resethand") install_app_handler(open_guard_page, SA_RESETHAND);
  if (mode == "mask") install_app_handler(report_mask, 0);
  if (mode == "mask-nodefer") install_app_handler(report_mask, SA_NODEFER);
  if (mode == "ignored") {
    ::signal(SIGFPE, SIG_IGN);
    ::signal(SIGSEGV, SIG_IGN);
  }
  crash::install(crash::wait_from_environment());
  Expected<std::unique_ptr<ChunkStore>> store = ChunkStore::open(argv[1]);
  if (!store) return 2;
  if (mode == "exit-thread") std::atexit([] { if (writer.joinable()) writer.join(); });  // as the recorder's

  auto first = build(**store, "complete-1", 3);
  crash::writer_begin();
  write(*first);
  crash::writer_end();

  auto second = build(**store, "complete-2", 5);
  crash::writer_begin();
  writer = std::thread([&second, stuck = mode == "stuck", self = mode == "writer-segv"] {
    crash::writer_thread();
    if (self) {
      std::printf("crashing: %s\n", "writer-segv");
      std::fflush(stdout);
      *static_cast<volatile int*>(nullptr) = 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // storing the device copies
    if (stuck) std::this_thread::sleep_for(std::chrono::hours(1));
    write(*second);
    crash::writer_end();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the writer is at work

  auto in_flight = build(**store, "in-flight", 7);  // its epilogue taken, not handed to the writer
  if (mode == "writer-segv") writer.join();
  die_as(mode);
  return 2;
}
