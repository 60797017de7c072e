// LeaseTable: P's record of blocks held for remote readers, and the generation table D checks.
//
// Every logical block of P has a lease generation, stored in a contiguous array of uint64
// (little endian) that the connector registers with its transfer agent and advertises in the
// handshake — one identical copy per tensor-parallel rank, each registered with that rank's
// agent, so a D rank checks the P rank it read from. Grant() records a lease (request id, blocks,
// expiry) and returns the blocks' current generations, which P sends to D in
// kv_transfer_params.remote_block_generations. End() (D's notification, or the lease running out)
// bumps the generation of every block no other lease still holds, BEFORE the connector reports the
// request in finished_sending — i.e. before the engine can free and reuse the block. A D that reads
// the generations after its data read and finds them unchanged therefore knows no reuse started
// before its read completed (docs/connector.md, "Lease and generation").
//
// Why not kv::BlockPool::Generation: the pool's counter lives in engine memory a remote reader
// cannot read, and it moves when the pool frees, after finished_sending; the connector must
// publish the bump itself, at the moment it gives the blocks back.
//
// Who uses it: the connector's Registration (P's table, one copy per rank in the agents'
// memory), and the Python package (`kvferry.LeaseTable`), where vLLM's KvferryConnector keeps
// two: one in P's worker, in memory its agent registered, and a mirror in P's scheduler
// process, which grants the same leases first and ends them last, so the generations it puts
// in kv_transfer_params are never above the worker's (docs/vllm.md, "Leases and
// generations").
//
// Thread-safety: all methods are safe to call from any thread (internal mutex). The generation
// array is also read remotely by the transport at any time; writes are single aligned 64-bit
// stores.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/kv/block_id.h"

namespace kvferry::connector {

class LeaseTable {
 public:
  explicit LeaseTable(int32_t num_blocks_logical, int32_t num_copies = 1);
  // The copies in memory the caller owns (the connector's transfer agents', which a same-host
  // D maps): each at least num_blocks_logical uint64s, 8-byte aligned, outliving the table.
  LeaseTable(int32_t num_blocks_logical, std::vector<uint64_t*> storage);
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // Copy `copy` of the generation array, for registration (stable address for the table's
  // lifetime). Every copy holds the same values.
  void* generations_data(int32_t copy = 0) { return generations_[copy]; }
  uint64_t generations_size_bytes() const { return num_blocks_ * sizeof(uint64_t); }
  int32_t num_blocks_logical() const { return num_blocks_; }

  // Records a lease; returns one generation per id. AlreadyExists for a request id with a live
  // lease; OutOfRange for an id outside [0, num_blocks_logical) (nothing recorded).
  StatusOr<std::vector<uint64_t>> Grant(const std::string& request_id,
                                        std::span<const kv::LogicalBlockId> ids, Deadline expiry);
  // Ends a lease, bumping generations as described above. NotFound if no live lease.
  Status End(const std::string& request_id);
  // Ends every lease whose expiry has passed; returns their request ids.
  std::vector<std::string> EndExpired();
  bool Has(const std::string& request_id) const;

  uint64_t Generation(kv::LogicalBlockId id) const;
  int64_t blocks_held() const;  // distinct blocks with at least one live lease
  int64_t leases() const;

 private:
  struct Lease {
    std::vector<kv::LogicalBlockId> ids;
    Deadline expiry;
  };
  void EndLocked(std::map<std::string, Lease>::iterator it) REQUIRES(mu_);

  const int32_t num_blocks_;
  std::vector<uint64_t*> generations_;              // written under mu_, read remotely
  std::vector<std::unique_ptr<uint64_t[]>> owned_;  // the copies, unless given storage
  mutable Mutex mu_;
  std::vector<int32_t> hold_counts_ GUARDED_BY(mu_);
  std::map<std::string, Lease> leases_ GUARDED_BY(mu_);
  int64_t blocks_held_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvferry::connector
