// Status and Result<T>: how expected failures travel (bad files, bad requests, I/O, a tier
// down). No exceptions cross module boundaries; third-party exceptions are caught at the edge.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace kvserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from a user: a request, a flag, a config value
  kNotFound,          // a file, model or key that is not there
  kCorrupt,           // a file or record that fails its own format rules or checksum
  kOutOfRange,        // a value or request beyond a configured limit
  kResourceExhausted, // a queue or budget that is full
  kUnavailable,       // a dependency that is down (a tier, a socket)
  kIoError,           // the operating system said no
  kUnimplemented,     // a feature this build does not have
  kInternal,          // a bug: should not happen
};

const char* StatusCodeName(StatusCode code);

// A success, or an error code with a message that names the problem.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CORRUPT: tensor 'x' ends past the end of the file"
  std::string ToString() const;

  // Prefixes the message with context: "reading model.gguf: <message>".
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    CHECK(!status_.ok()) << "Result built from an ok Status without a value";
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // note: only when ok().
  T& value() & {
    CHECK(ok()) << status_.ToString();
    return *value_;
  }
  const T& value() const& {
    CHECK(ok()) << status_.ToString();
    return *value_;
  }
  T&& value() && {
    CHECK(ok()) << status_.ToString();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kvserve

// Returns early from the enclosing function when `expr` (a Status) is not ok.
#define KV_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::kvserve::Status kv_status_ = (expr);    \
    if (!kv_status_.ok()) return kv_status_;  \
  } while (0)

#define KV_CONCAT_INNER(a, b) a##b
#define KV_CONCAT(a, b) KV_CONCAT_INNER(a, b)

// KV_ASSIGN_OR_RETURN(auto x, ComputeResult()); returns the error Status when not ok.
#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL(KV_CONCAT(kv_result_, __LINE__), lhs, expr)
#define KV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
