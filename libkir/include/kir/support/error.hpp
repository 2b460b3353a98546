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
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace kir {

class Error {
 public:
  explicit Error(std::string text) : text_(std::move(text)) {}

  const std::string& message() const { return text_; }

  /// Prefix the message with where it happened ("container #2 at ...").
  Error& within(const std::string& where) {
    text_ = where + ": " + text_;
    return *this;
  }

 private:
  std::string text_;
};

/// A value or an Error. Test it before use: `if (!x) return x.error();`.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
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
