// The layer's failure log (failure_log.hpp).
#include "failure_log.hpp"

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "kir/support/error.hpp"
#include "kir_hook_internal/settings.hpp"

namespace kir::hook {

namespace {

class FailureLog {
 public:
  FailureLog() {
    const char* where = setting("KIR_HOOK_LOG");
    if (!where || !*where || std::strcmp(where, "0") == 0) return;
    file_ = std::strcmp(where, "1") == 0 ? stderr : std::fopen(where, "a");
    if (!file_) {
      std::fprintf(stderr, "kir-hook: error: KIR_HOOK_LOG: cannot open %s: %s; logging to stderr\n", where,
                   std::strerror(errno));
      file_ = stderr;
    }
  }

  void add(Failure kind, ErrorCode code, const std::string& what, const std::string& detail, bool always) {
    ++counts_[size_t(kind)];
    if (code != ErrorCode::none && uint32_t(code) < kErrorCodes) ++by_code_[uint32_t(code)];
    if (!file_ && !always) return;
    FILE* to = file_ ? file_ : stderr;
    std::lock_guard<std::mutex> lock(mutex_);
    std::fprintf(to, "kir-hook: error: %s: %s\n", what.c_str(), detail.c_str());
    std::fflush(to);
  }

  uint64_t count(Failure kind) const { return counts_[size_t(kind)].load(); }
  uint64_t count(ErrorCode code) const { return uint32_t(code) < kErrorCodes ? by_code_[uint32_t(code)].load() : 0; }

 private:
  std::array<std::atomic<uint64_t>, kFailureKinds> counts_{};
  std::array<std::atomic<uint64_t>, kErrorCodes> by_code_{};  // [none] stays 0: failures of no libkir error
  std::mutex mutex_;                                          // one line at a time
  FILE* file_ = nullptr;  // KIR_HOOK_LOG: "1" stderr, else a path; unset or "0": no lines
};

FailureLog& failure_log() {
  static FailureLog* log = new FailureLog();  // never destroyed: failures may come during exit
  return *log;
}

}  // namespace

void report_failure(Failure kind, const std::string& what, const std::string& detail, bool always) {
  failure_log().add(kind, ErrorCode::none, what, detail, always);
}

void report_failure(Failure kind, const std::string& what, const std::string& context, const Error& error) {
  failure_log().add(kind, error.code(), what, context + error.message(), false);
}

uint64_t failure_count(Failure kind) { return failure_log().count(kind); }

uint64_t failure_count(ErrorCode code) { return failure_log().count(code); }

uint64_t failure_count() {
  uint64_t n = 0;
  for (size_t i = 0; i < kFailureKinds; ++i) n += failure_count(Failure(i));
  return n;
}

std::string describe(const char* noun, const void* handle) {
  return std::string(noun) + " " + hex(reinterpret_cast<uintptr_t>(handle));
}

}  // namespace kir::hook
