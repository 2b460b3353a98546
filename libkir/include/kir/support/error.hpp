// Errors as values.
//
// The core never throws for bad input: every parser returns Expected<T>, which
// holds either a value or an Error. An Error's text says what went wrong and
// where (which file, container, entry, byte offset); callers add the outer
// context with within() as the error travels up, so the final message reads
// from the outside in:
//
//   app: .nv_fatbin: container #2 at file offset 0x8fc10: entry #3 at file
//   offset 0x8fd60: payload size 0x5000 runs past the end of the container
//   (0x3000 bytes left)
//
// Besides the text an Error carries a code (what kind of failure, for callers
// that act on it: kir_last_error_code(), the Python exception's class) and,
// where the parser knows it, the byte offset of the offending field in the
// outermost buffer it read (the file; for a compressed image, the decompressed
// image): kir_last_error_offset(), the exception's .offset. The message keeps
// naming the offset as before; within() keeps code and offset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kir {

/// What kind of failure an Error is. The numbers are kir.h's KIR_ERROR_* (and
/// Python's kir.errors.ErrorCode); they are never renumbered, new codes are
/// appended. error_code_name() gives each its name.
enum class ErrorCode : uint32_t {
  none = 0,                 // no error (kir_last_error_code() before any failure)
  bad_magic = 1,            // not the format asked for: no magic, wrong magic, an unrecognized file
  truncated = 2,            // the data ends inside a structure that must be whole (a header, a record)
  out_of_bounds = 3,        // an offset, size, count or index in the data points outside its buffer
  malformed = 4,            // a field holds a value the format does not allow (not about bounds)
  unsupported_version = 5,  // a format version this kir does not read
  unsupported = 6,          // valid, but not something kir reads (ELF32, an unknown codec, obfuscated code)
  corrupt = 7,              // a checksum or hash does not match the bytes: damaged after it was written
  too_large = 8,            // over a limit kir enforces (a decompressed size, a count)
  io = 9,                   // the operating system failed a read, write, open, map
  permission = 10,          // refused: the system's permissions, or kir's trust rules (a cache not the user's)
  not_found = 11,           // no such file, group, image, kernel or entry
  invalid_argument = 12,    // the caller's mistake: a NULL pointer, an index out of range, a bad struct_size
  internal = 13,            // anything else: a device driver's or a library's failure
};
constexpr uint32_t kErrorCodes = 14;

/// "truncated", "bad_magic" ... (the enumerator's name; Python's ErrorCode member, upper-cased).
const char* error_code_name(ErrorCode code);

/// The code of a failed system call's errno: not_found (ENOENT), permission
/// (EACCES, EPERM), else io.
ErrorCode errno_code(int error_number);

/// The offset an Error has when it is not about a byte (kir.h KIR_NO_OFFSET).
constexpr uint64_t kNoOffset = UINT64_MAX;

class Error {
 public:
  /// An error with no code given: ErrorCode::internal. Parsers give the code.
  explicit Error(std::string text) : text_(std::move(text)) {}
  Error(ErrorCode code, std::string text, uint64_t offset = kNoOffset)
      : text_(std::move(text)), code_(code), offset_(offset) {}

  const std::string& message() const { return text_; }
  ErrorCode code() const { return code_; }
  /// The byte offset of the offending field, when the error is about one.
  std::optional<uint64_t> offset() const {
    return offset_ == kNoOffset ? std::nullopt : std::optional<uint64_t>(offset_);
  }
  /// offset(), or kNoOffset.
  uint64_t raw_offset() const { return offset_; }

  /// Prefix the message with where it happened ("container #2 at ..."); the
  /// code and offset stay.
  Error& within(const std::string& where) {
    text_ = where + ": " + text_;
    return *this;
  }

  /// Set the offset when none is set yet (an inner parser's is more precise).
  Error& at(uint64_t offset) {
    if (offset_ == kNoOffset) offset_ = offset;
    return *this;
  }

 private:
  std::string text_;
  ErrorCode code_ = ErrorCode::internal;
  uint64_t offset_ = kNoOffset;
};

/// A value or an Error. Test it before use: `if (!x) return x.error();`.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT

  explicit operator bool() const { return v_.index() == 0; }
  bool ok() const { return v_.index() == 0; }

  T& operator*() { return std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }

  Error& error() { return std::get<1>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Expected<void>: success, or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT
  explicit operator bool() const { return !failed_; }
  const Error& error() const { return error_; }
  Error& error() { return error_; }

 private:
  Error error_{""};
  bool failed_ = false;
};

/// "0x1f" — how every offset and size appears in messages.
std::string hex(uint64_t value);

}  // namespace kir
