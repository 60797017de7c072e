// Registration: the memory side of one FerryConnector — every tensor-parallel rank's transfer
// agent and what it registered (the KV cache, or P's host-buffer mirror of it), where the cache
// memory comes from (CacheMemoryFor), where the lease generation table lives, the side channel
// P serves its metadata on, and the order in which all of it is torn down.
//
// Set up once by RegisterKvCaches (Register, then StartServing on P); read-only afterwards,
// except the agents, which the Producer and Consumer use to move bytes and hear notifications.
//
// Shutdown order (docs/connector.md): the side channel stops first (BeginShutdown), the Consumer
// then cancels its transfers and closes its peers, then ReleaseAgents frees the agents before
// the engine memory they registered — unless everything they registered is their own
// allocation (host buffer, or a cache allocated through CacheMemoryFor), in which case they
// live until the destructor, because the engine whose cache is their memory may outlive
// Shutdown. The destructor detaches the cache memory and frees the agents before the lease
// table, whose copies may be agent memory.
//
// Thread-safety: engine thread only, except side_channel_port() (any thread) and the side
// channel handler (server thread; it must only read what Register fixed).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "connector/agent_cache_memory.h"
#include "connector/connector_context.h"
#include "connector/handshake_wire.h"
#include "connector/side_channel.h"
#include "kvferry/connector/lease_table.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/head_sharding.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::connector::internal {

// One tensor-parallel rank's side of the transfer: what its agent registered and serves.
struct RankEndpoint {
  std::unique_ptr<transfer::Agent> agent;
  kv::KvCache* cache = nullptr;
  kv::CacheSpec spec;                                 // the rank's cache: its KV heads
  std::vector<transfer::RegionHandle> local_regions;  // cache or host-buffer regions
  std::vector<std::byte*> host_regions;      // P's host buffer (kv_buffer_device cpu), agent-owned
  transfer::RegionHandle generation_region;  // this rank's copy of the lease generations
  // Direct mode: the cache's regions, allocated by `agent` (the engine asked CacheMemoryFor).
  std::shared_ptr<AgentCacheMemory> cache_memory;
};

// The name of rank `rank`'s transfer agent: the engine id at TP 1, "<engine id>.tp<rank>".
std::string RankAgentName(const std::string& engine_id, int32_t rank, int32_t tp_size);

class Registration {
 public:
  Registration(const ConnectorContext* ctx, std::vector<std::unique_ptr<transfer::Agent>> agents);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  // Where rank `rank`'s cache regions come from (connector.h); nullopt once shut down.
  std::optional<kv::CacheMemory> CacheMemoryFor(int32_t rank);
  // Every rank's cache with its agent, the block geometry (from the allocated memory, never
  // from configuration), and the lease table. Once.
  Status Register(std::span<kv::KvCache* const> caches, const kv::HeadSharding& sharding,
                  int32_t block_size_logical);
  // P: every rank's metadata in one pre-encoded reply, and the side channel; `handler` answers
  // each request (on the server thread).
  Status StartServing(std::function<std::string(std::string_view)> handler);
  // The first step of Shutdown: the connector is shut down from here on (shut_down()), and the
  // side channel stops.
  void BeginShutdown();
  // The last step of Shutdown (see the header comment).
  void ReleaseAgents();

  bool registered() const { return registered_; }
  bool shut_down() const { return shut_down_; }
  // This connector's ranks (local indices 0..tp_size()-1) are the engine's ranks
  // [first_rank(), first_rank() + tp_size()) of engine_tp_size() (FerryConnectorOptions).
  int32_t tp_size() const { return static_cast<int32_t>(ranks_.size()); }
  int32_t first_rank() const { return ctx_->options.first_rank; }
  int32_t engine_tp_size() const;
  int32_t EngineRank(int32_t local_rank) const { return first_rank() + local_rank; }
  RankEndpoint& rank(int32_t r) { return ranks_[r]; }
  const RankEndpoint& rank(int32_t r) const { return ranks_[r]; }
  const kv::HeadSharding& sharding() const { return sharding_; }
  const kv::BlockGeometry& geometry() const { return *geometry_; }
  int32_t block_size_logical() const { return block_size_logical_; }
  const std::string& compat_hash() const { return compat_hash_; }
  LeaseTable& leases() { return *leases_; }
  const std::string& handshake_reply() const { return handshake_reply_; }
  int32_t side_channel_port() const { return server_port_.load(); }
  std::string AgentName(int32_t rank) const;
  // What this connector's agents refused from peers, by reason, summed over its ranks
  // (transfer::AgentStats::refused_inbound); empty once the agents are released.
  std::map<std::string, uint64_t> RefusedInbound() const;

 private:
  Status RegisterRank(int32_t rank, kv::KvCache* cache);
  Status RegisterCacheRegions(int32_t rank, kv::KvCache* cache);
  Status MakeLeaseTable(int32_t num_blocks_logical);
  HandshakeMetadata MetadataOf(int32_t rank, std::string agent_blob) const;
  void LogServing() const;

  const ConnectorContext* const ctx_;
  std::unique_ptr<LeaseTable> leases_;  // declared first: outlives the agents in ranks_
  std::vector<RankEndpoint> ranks_;     // one per TP rank, agents from the factory
  bool registered_ = false;
  bool shut_down_ = false;
  // MakeLeaseTable: nothing the agents registered is the engine's, so Shutdown keeps them.
  bool agents_outlive_shutdown_ = false;
  kv::HeadSharding sharding_;  // the engine's KV heads over the engine's ranks
  std::optional<kv::BlockGeometry> geometry_;
  int32_t block_size_logical_ = 0;
  std::string compat_hash_;
  std::string handshake_reply_;  // pre-encoded, every rank's metadata (of this connector)
  std::unique_ptr<SideChannelServer> server_;
  std::atomic<int32_t> server_port_{0};
};

}  // namespace kvferry::connector::internal
