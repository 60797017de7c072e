// LogicalBlockId and KernelBlockId: the two id spaces of the KV cache (docs/kv_layout.md).
//
// A *logical* block is `block_size_logical` tokens: the unit of the scheduler, the prefix cache,
// kv_transfer_params and failure reports. A *kernel* block is `block_size_kernel` tokens: the page
// of the KV tensor, the unit of descriptors and copies. The seed's bug (vLLM PR #28677) was using
// one where the other was meant. Here they are distinct types with no implicit conversion and no
// shared integer API: code that addresses memory takes KernelBlockId, the scheduler and the wire
// carry LogicalBlockId, and the only way from one to the other is BlockGeometry::KernelBlocksOf()
// (kv/block_geometry.h). Passing one where the other is required does not compile
// (tests/compile_fail proves it).
//
// Thread-safety: values.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace kvferry::kv {

class LogicalBlockId {
 public:
  constexpr LogicalBlockId() = default;
  constexpr explicit LogicalBlockId(int32_t value) : value_(value) {}
  constexpr int32_t value() const { return value_; }
  friend constexpr auto operator<=>(LogicalBlockId, LogicalBlockId) = default;

 private:
  int32_t value_ = -1;
};

class KernelBlockId {
 public:
  constexpr KernelBlockId() = default;
  constexpr explicit KernelBlockId(int32_t value) : value_(value) {}
  constexpr int32_t value() const { return value_; }
  friend constexpr auto operator<=>(KernelBlockId, KernelBlockId) = default;

 private:
  int32_t value_ = -1;
};

}  // namespace kvferry::kv

template <>
struct std::hash<kvferry::kv::LogicalBlockId> {
  size_t operator()(kvferry::kv::LogicalBlockId id) const noexcept {
    return std::hash<int32_t>()(id.value());
  }
};
template <>
struct std::hash<kvferry::kv::KernelBlockId> {
  size_t operator()(kvferry::kv::KernelBlockId id) const noexcept {
    return std::hash<int32_t>()(id.value());
  }
};
