// Kernel-name patterns: `--kernel REGEX` of every kir command (trace, record,
// inspect, hash, diff, jit compile), KIR_TRACE_KERNELS and KIR_RECORD_KERNELS.
//
// One dialect: the regular expressions on which Python's re, POSIX ERE and RE2
// agree (docs/architecture.md, "Kernel-name patterns"): literals, `.`, bracket
// expressions ([a-z], [^...], \d \w \s \D \W \S and escapes inside, POSIX
// [[:alpha:]]-style classes), the escapes \d \w \s \D \W \S \t \n \r \f \v, a
// backslash before any punctuation, groups ( ) and (?: ), |, the quantifiers
// * + ? {n} {n,} {n,m} (n, m <= 1000) and their lazy forms, the anchors ^ $ \b,
// and a leading (?i) (ASCII case). Anything else — backreferences, lookaround,
// named groups, other flags, unknown escapes, a `{` that is not a repetition —
// is refused with an Error naming the construct and its byte offset.
//
// One engine, kir's own: the pattern is parsed without recursion into a
// Thompson NFA of at most kMaxProgram instructions, matched by simulating the
// NFA (a Pike VM without captures): time O(name length x program size), memory
// O(program size), no backtracking, and a stack depth that depends on neither
// the name nor the pattern — a name of any length matches on a small thread
// stack. The hook's clients use it inside the app, the Python package through
// its bindings (_core.KernelPattern).
//
// Names are bytes: `.` and a bracket expression match one byte, a non-ASCII
// byte of the pattern (outside brackets) matches itself. `$` matches at the end
// of the name only, `.` any byte but a newline.
//
// One rule: a pattern selects a kernel when it matches anywhere in (searches,
// not anchors) its mangled name or its demangled name (kir::demangle of the
// mangled one): `axpy`, `^_Z4axpy` and `^axpy\(float` all select _Z4axpyfPKfPfi.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kir/support/error.hpp"

namespace kir {

class KernelPattern {
 public:
  /// The largest count of a repetition ({n}, {n,}, {n,m}).
  static constexpr size_t kMaxRepeat = 1000;
  /// The largest compiled program, in NFA instructions (counted repetitions
  /// expanded): a pattern that needs more is refused ("pattern too large").
  static constexpr size_t kMaxProgram = 5000;

  /// `pattern` compiled, or an Error naming what is wrong and where
  /// ("not a kir pattern: lookbehind (?<= at offset 0: not supported").
  static Expected<KernelPattern> create(std::string_view pattern);

  /// Whether `text` contains a match.
  bool search(std::string_view text) const;
  /// Whether the pattern selects the kernel `mangled` (the rule above); the
  /// demangled name is computed only when the mangled one does not match.
  bool selects(std::string_view mangled) const;
  /// The same, with the demangled name already at hand (kir::demangle(mangled)).
  bool selects(std::string_view mangled, std::string_view demangled) const;

  const std::string& pattern() const { return pattern_; }
  /// The compiled program's size in instructions (at most kMaxProgram).
  size_t program_size() const;

  struct Program;

 private:
  KernelPattern(std::string pattern, std::shared_ptr<const Program> program)
      : pattern_(std::move(pattern)), program_(std::move(program)) {}

  std::string pattern_;
  std::shared_ptr<const Program> program_;  // immutable: one pattern may match on many threads
};

}  // namespace kir
