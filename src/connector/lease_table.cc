#include "kvferry/connector/lease_table.h"

#include <fmt/format.h>

#include <atomic>

namespace kvferry::connector {

LeaseTable::LeaseTable(int32_t num_blocks_logical, int32_t num_copies)
    : LeaseTable(num_blocks_logical, std::vector<uint64_t*>()) {
  for (int32_t c = 0; c < num_copies; ++c) {
    owned_.emplace_back(new uint64_t[static_cast<size_t>(num_blocks_logical)]);
    generations_.push_back(owned_.back().get());
    for (int32_t i = 0; i < num_blocks_; ++i) generations_.back()[i] = 1;
  }
}

LeaseTable::LeaseTable(int32_t num_blocks_logical, std::vector<uint64_t*> storage)
    : num_blocks_(num_blocks_logical),
      generations_(std::move(storage)),
      hold_counts_(static_cast<size_t>(num_blocks_logical), 0) {
  // Start at 1 so that a zeroed (never written) table can never match.
  for (uint64_t* copy : generations_) {
    for (int32_t i = 0; i < num_blocks_; ++i) copy[i] = 1;
  }
}

StatusOr<std::vector<uint64_t>> LeaseTable::Grant(const std::string& request_id,
                                                  std::span<const kv::LogicalBlockId> ids,
                                                  Deadline expiry) {
  MutexLock lock(&mu_);
  if (leases_.count(request_id) != 0) {
    return AlreadyExistsError(fmt::format("request {} already holds a lease", request_id));
  }
  for (kv::LogicalBlockId id : ids) {
    if (id.value() < 0 || id.value() >= num_blocks_) {
      return OutOfRangeError(
          fmt::format("lease of block {} outside [0, {})", id.value(), num_blocks_));
    }
  }
  std::vector<uint64_t> gens;
  gens.reserve(ids.size());
  for (kv::LogicalBlockId id : ids) {
    if (hold_counts_[id.value()]++ == 0) ++blocks_held_;
    gens.push_back(std::atomic_ref<uint64_t>(generations_[0][id.value()]).load());
  }
  leases_.emplace(request_id,
                  Lease{std::vector<kv::LogicalBlockId>(ids.begin(), ids.end()), expiry});
  return gens;
}

void LeaseTable::EndLocked(std::map<std::string, Lease>::iterator it) {
  for (kv::LogicalBlockId id : it->second.ids) {
    if (--hold_counts_[id.value()] == 0) {
      --blocks_held_;
      for (uint64_t* copy : generations_) {
        std::atomic_ref<uint64_t>(copy[id.value()]).fetch_add(1, std::memory_order_seq_cst);
      }
    }
  }
  leases_.erase(it);
}

Status LeaseTable::End(const std::string& request_id) {
  MutexLock lock(&mu_);
  auto it = leases_.find(request_id);
  if (it == leases_.end()) {
    return NotFoundError(fmt::format("no lease for request {}", request_id));
  }
  EndLocked(it);
  return Status::Ok();
}

std::vector<std::string> LeaseTable::EndExpired() {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto next = std::next(it);
    if (it->second.expiry.Expired()) {
      out.push_back(it->first);
      EndLocked(it);
    }
    it = next;
  }
  return out;
}

bool LeaseTable::Has(const std::string& request_id) const {
  MutexLock lock(&mu_);
  return leases_.count(request_id) != 0;
}

uint64_t LeaseTable::Generation(kv::LogicalBlockId id) const {
  MutexLock lock(&mu_);
  return std::atomic_ref<uint64_t>(generations_[0][id.value()]).load();
}

int64_t LeaseTable::blocks_held() const {
  MutexLock lock(&mu_);
  return blocks_held_;
}

int64_t LeaseTable::leases() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(leases_.size());
}

}  // namespace kvferry::connector
