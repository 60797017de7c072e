// StatusError: how a non-OK kvferry::Status crosses into Python. The bindings throw it; the
// translator registered by RegisterStatusErrors (module.cc) raises the kvferry exception class of
// its code (kvferry/_errors.py: InvalidArgumentError, NotFoundError, ...), carrying the code and
// the message. Only the binding sources (python/src) include this header.
#pragma once

#include <nanobind/nanobind.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "kvferry/common/status.h"

namespace kvferry::python {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& status)
      : std::runtime_error(std::string(status.message())), code_(status.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// Throws StatusError unless `status` is OK.
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// The value of an OK StatusOr; throws StatusError otherwise.
template <typename T>
T ValueOrThrow(StatusOr<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Registers the StatusCode enum on `m` and the StatusError translator (module init only).
void RegisterStatusErrors(nanobind::module_& m);

}  // namespace kvferry::python
