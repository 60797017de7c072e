// Status and StatusOr<T>: errors as values, after abseil.
//
// The code says what the caller should do next:
//   kInvalidArgument    bad input; fix the input, do not retry
//   kOutOfRange         an index or range outside what exists; fix the input
//   kNotFound           the named thing does not exist (yet)
//   kAlreadyExists      the thing is already there
//   kFailedPrecondition the system is not in a state for this call; fix state first
//   kResourceExhausted  out of blocks/memory/slots; retry later or shed load
//   kUnavailable        peer unreachable or gone; retry, possibly elsewhere
//   kDeadlineExceeded   the call's deadline fired; the operation may still be in flight
//   kAborted            the operation was cancelled or lost a race; restart it
//   kDataLoss           bytes are not what they should be (corrupt, stale generation)
//   kUnimplemented      not supported by this build/backend
//   kInternal           a broken invariant: a bug
//   kUnauthenticated    the caller did not prove who it is (no or a wrong key); fix the
//                       credentials, do not retry as is
//
// Thread-safety: values; a const Status may be read from any thread.
#pragma once

#include <cassert>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvferry {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,
  kOutOfRange,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kDeadlineExceeded,
  kAborted,
  kDataLoss,
  kUnimplemented,
  kInternal,
  kUnauthenticated,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  std::string_view message() const { return rep_ ? std::string_view(rep_->message) : ""; }

  // "CODE: message" or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (same code). OK stays OK.
  Status WithContext(std::string_view context) const;

  // Explicitly drops a status the caller has decided not to act on.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null == OK; cheap to copy
};

std::ostream& operator<<(std::ostream& os, const Status& s);

Status InvalidArgumentError(std::string message);
Status OutOfRangeError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status DeadlineExceededError(std::string message);
Status AbortedError(std::string message);
Status DataLossError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnauthenticatedError(std::string message);

// A T or the error that prevented it. Constructing from an OK status is a bug (kInternal).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = InternalError("StatusOr constructed from OK status");
  }
  StatusOr(Status&& status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("StatusOr constructed from OK status");
  }
  StatusOr(const T& value) : value_(value) {}        // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, StatusOr<T>> &&
                                                    !std::is_same_v<std::decay_t<U>, T>>>
  StatusOr(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T& value() & {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;  // OK iff value_ holds a value
  std::optional<T> value_;
};

}  // namespace kvferry

#define KVF_CONCAT_INNER_(a, b) a##b
#define KVF_CONCAT_(a, b) KVF_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define KVF_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::kvferry::Status kvf_status_ = (expr);    \
    if (!kvf_status_.ok()) return kvf_status_; \
  } while (0)

// `lhs` = value of the StatusOr `rexpr`, or return its error.
#define KVF_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVF_ASSIGN_OR_RETURN_IMPL_(KVF_CONCAT_(kvf_statusor_, __LINE__), lhs, rexpr)
#define KVF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                               \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
