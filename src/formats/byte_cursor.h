// ByteCursor (internal): reads little-endian values and length-prefixed strings off a byte span,
// refusing every read that would pass its end. What the GGUF parser reads a header with.
//
// Errors are DataLoss without the file's name ("at byte 40: 8-byte u64 runs past the end (44
// bytes)"); the caller adds what was being read and where.
//
// Thread-safety: a value; one thread at a time.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "kvferry/common/status.h"

namespace kvferry::formats::internal {

static_assert(std::endian::native == std::endian::little,
              "ByteCursor reads file integers as host integers");

class ByteCursor {
 public:
  explicit ByteCursor(std::span<const std::byte> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  StatusOr<T> Read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    KVF_RETURN_IF_ERROR(Need(sizeof(T), what));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  // A u64 length, then that many bytes.
  StatusOr<std::string> ReadString(std::string_view what) {
    KVF_ASSIGN_OR_RETURN(const uint64_t length, Read<uint64_t>(what));
    KVF_RETURN_IF_ERROR(Need(length, what));
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return s;
  }

 private:
  Status Need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return Status::Ok();
    return DataLossError("at byte " + std::to_string(pos_) + ": " + std::string(what) + " of " +
                         std::to_string(n) + " bytes runs past the end (" +
                         std::to_string(bytes_.size()) + " bytes)");
  }

  std::span<const std::byte> bytes_;
  uint64_t pos_ = 0;
};

}  // namespace kvferry::formats::internal
