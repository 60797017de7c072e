// Budget: the work and size limits one render runs under, so that a runaway template (an
// endless-looking loop, a string doubled in a loop, a huge range) ends with an error instead
// of a hang or an allocation failure.
//
//   steps  one per loop iteration, macro call and item a filter walks, one per KiB a string
//          operation reads or writes; `max_steps` in total per render.
//   bytes  no string or output may exceed `max_bytes`; operations that would build a larger
//          one fail before allocating it.
//
// Exhaustion is kOutOfRange ("the input needs more than the limits allow"; not retryable).
//
// Thread-safety: not synchronized; one render, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvferry/common/status.h"

namespace kvferry::jinja {

class Budget {
 public:
  Budget(int64_t max_steps, size_t max_bytes) : steps_left_(max_steps), max_bytes_(max_bytes) {}

  Status Charge(int64_t steps) {
    steps_left_ -= steps;
    if (steps_left_ < 0) {
      return OutOfRangeError(
          "template render exceeded its step limit (loop iterations, calls "
          "and items processed)");
    }
    return Status::Ok();
  }

  // Charges for reading or writing `bytes` of string data.
  Status ChargeBytes(uint64_t bytes) { return Charge(1 + static_cast<int64_t>(bytes >> 10)); }

  // Fails if a string of `bytes` would exceed the size limit.
  Status CheckSize(uint64_t bytes) const {
    if (bytes > max_bytes_) {
      return OutOfRangeError("template render would build a string of " + std::to_string(bytes) +
                             " bytes, above its limit of " + std::to_string(max_bytes_));
    }
    return Status::Ok();
  }

  // CheckSize for `count` pieces of `size` bytes, without overflowing.
  Status CheckProduct(uint64_t count, uint64_t size) const {
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(count, size, &bytes)) bytes = UINT64_MAX;
    return CheckSize(bytes);
  }

  // CheckSize, then ChargeBytes: for an operation about to build `bytes` of output.
  Status Build(uint64_t bytes) {
    KVF_RETURN_IF_ERROR(CheckSize(bytes));
    return ChargeBytes(bytes);
  }

  size_t max_bytes() const { return max_bytes_; }

 private:
  int64_t steps_left_;
  size_t max_bytes_;
};

}  // namespace kvferry::jinja
