// The factory, the facade, and the two halves of connector.h as thin dispatchers to the parts
// (ferry_connector_impl.h). D's load decisions live in the scheduler half.
#include "kvferry/connector/ferry_connector.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "connector/ferry_connector_impl.h"
#include "kvferry/common/logging.h"

namespace kvferry::connector {
namespace internal {

FerryConnectorImpl::FerryConnectorImpl(const KvTransferConfig& config,
                                       const FerryConnectorOptions& options, std::string engine_id,
                                       std::vector<std::unique_ptr<transfer::Agent>> agents,
                                       SideChannelKeys keys)
    : ctx_{config, std::move(keys), options, std::move(engine_id), {}},
      registration_(&ctx_, std::move(agents)) {
  InstallFaultInjectionFromEnv();
}

FerryConnectorImpl::~FerryConnectorImpl() { Shutdown(); }

// Fault injection for the process-level fault tests (docs/reliability.md): widen the window
// between a pull's data READ and its generation READ (which carries the notification), so a
// test can kill P in it. Blocks the engine thread for that long; never set it in production.
// KVFERRY_FAULT_DATA_READ_MARKER names a file that gets one line per completed data READ
// before the pause, so the test acts inside the window instead of guessing when it opens.
void FerryConnectorImpl::InstallFaultInjectionFromEnv() {
  const char* env = std::getenv("KVFERRY_FAULT_PAUSE_AFTER_DATA_READ_MS");
  const int pause_ms = env != nullptr ? std::atoi(env) : 0;
  if (pause_ms <= 0) return;
  const char* marker = std::getenv("KVFERRY_FAULT_DATA_READ_MARKER");
  KVF_LOG_WARN("connector {}: fault injection: pausing {} ms after each data READ", ctx_.engine_id,
               pause_ms);
  after_data_read_for_test =
      [pause_ms, path = std::string(marker ? marker : "")](const std::string& request_id) {
        if (!path.empty()) std::ofstream(path, std::ios::app) << request_id << "\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      };
}

Status FerryConnectorImpl::Register(std::span<kv::KvCache* const> caches,
                                    const kv::HeadSharding& sharding, int32_t block_size_logical) {
  KVF_RETURN_IF_ERROR(registration_.Register(caches, sharding, block_size_logical));
  if (ctx_.config.kv_role == KvRole::kConsumer) return Status::Ok();
  return registration_.StartServing(
      [this](std::string_view request) { return producer_.HandleSideChannel(request); });
}

void FerryConnectorImpl::Shutdown() {
  if (registration_.shut_down()) return;
  registration_.BeginShutdown();
  releaser_.Reap(/*all=*/true);
  consumer_.Shutdown();
  registration_.ReleaseAgents();
}

// ---------------------------------------------------------------------------------------------
// Scheduler half.

bool SchedulerHalf::IsConsumerRequest(const KvTransferParams* p) const {
  return p != nullptr && p->do_remote_prefill && c_->ctx_.config.kv_role != KvRole::kProducer;
}

MatchResult SchedulerHalf::GetNumNewMatchedTokens(const RequestView& request,
                                                  int32_t num_local_computed_tokens) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (!IsConsumerRequest(p)) return {};
  if (loads_issued_.count(request.request_id) != 0) return {};  // one pull per request
  // Without P's first token D computes the last prompt token itself (its logits give the first
  // output token), so it needs P's KV for [local hit, prompt - 1) at most; with it, D resumes
  // after it and needs every prompt token's KV. Never further than what P offered.
  const int32_t prompt = static_cast<int32_t>(request.prompt_tokens.size());
  const int32_t offered =
      p->remote_num_tokens < 0 ? prompt : std::min(p->remote_num_tokens, prompt);
  const int32_t needed = p->first_token ? prompt : prompt - 1;
  const int32_t external = std::min(offered, needed) - num_local_computed_tokens;
  MatchResult match;
  if (external > 0) {
    match.num_external_tokens = external;
    match.load_async = true;
  } else {
    // Nothing to read. If P holds blocks, a notification frees them (sent by the worker).
    match.no_load_outcome =
        p->remote_block_ids.empty() ? LoadOutcome::kNoneOffered : LoadOutcome::kNotifyOnly;
  }
  return match;
}

void SchedulerHalf::UpdateStateAfterAlloc(const RequestView& request,
                                          std::span<const kv::LogicalBlockId> block_ids,
                                          int32_t num_external_tokens) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (!IsConsumerRequest(p)) return;
  if (!loads_issued_.insert(request.request_id).second) return;
  LoadSpec spec;
  spec.request_id = request.request_id;
  spec.remote = *p;
  spec.local_block_ids.assign(block_ids.begin(), block_ids.end());
  spec.num_external_tokens = std::max(num_external_tokens, 0);
  spec.num_local_computed_tokens = request.num_computed_tokens;
  if (spec.num_external_tokens == 0) {
    // D needs none of P's KV: tell P to free its lease, over the side channel in the
    // background (nothing to read, so no handshake and no wait for the engine to step again).
    if (!p->remote_block_ids.empty()) {
      c_->ctx_.stats.Update([](ConnectorStats& s) { ++s.notify_only; });
      c_->releaser_.Release(*p);
    }
    return;
  }
  pending_loads_.push_back(std::move(spec));
}

void SchedulerHalf::OnTokensComputed(const RequestView& request,
                                     std::span<const kv::LogicalBlockId> block_ids,
                                     int32_t token_begin, int32_t token_end) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (!c_->ctx_.config.use_host_buffer() || p == nullptr || !p->do_remote_decode ||
      c_->ctx_.config.kv_role == KvRole::kConsumer || token_end <= token_begin) {
    return;
  }
  c_->producer_.OnTokensComputed(request, block_ids, token_begin, token_end);
}

FinishResult SchedulerHalf::ConsumerRequestFinished(const RequestView& request,
                                                    const KvTransferParams& p) {
  const std::string& id = request.request_id;
  const bool issued = loads_issued_.erase(id) != 0;
  if (c_->consumer_.AbortIfReading(id)) {
    // Finished while its pull is in flight: the transport may still write into the blocks, so
    // they stay allocated until the pull has stopped (reported in finished_sending).
    FinishResult delayed;
    delayed.delay_free_blocks = true;
    return delayed;
  }
  auto pending = std::find_if(pending_loads_.begin(), pending_loads_.end(),
                              [&](const LoadSpec& l) { return l.request_id == id; });
  if (pending != pending_loads_.end() || !issued) {
    // Finished before its pull started: tell P to free its blocks now, not at lease end, over
    // the side channel in the background (the engine may not step again for a while).
    if (pending != pending_loads_.end()) pending_loads_.erase(pending);
    if (!p.remote_block_ids.empty()) c_->releaser_.Release(p);
  }
  return {};
}

FinishResult SchedulerHalf::RequestFinished(const RequestView& request,
                                            std::span<const kv::LogicalBlockId> block_ids) {
  const KvTransferParams* p = request.kv_transfer_params;
  if (p == nullptr || c_->registration_.shut_down()) return {};
  if (IsConsumerRequest(p)) {
    FinishResult consumed = ConsumerRequestFinished(request, *p);
    // A prefill leg that pulled its prompt's prefix from another member (kv_both; the proxy's
    // prefix pulls) hands its blocks to D as well — unless its pull is still stopping.
    if (consumed.delay_free_blocks || !p->do_remote_decode) return consumed;
  }
  if (!p->do_remote_decode || c_->ctx_.config.kv_role == KvRole::kConsumer) return {};
  return c_->producer_.Finish(request, block_ids);
}

ConnectorMetadata SchedulerHalf::BuildConnectorMeta() {
  ConnectorMetadata meta;
  meta.loads = std::move(pending_loads_);
  pending_loads_.clear();
  meta.requests_to_hold = c_->producer_.TakeHolds();
  return meta;
}

void SchedulerHalf::UpdateConnectorOutput(const ConnectorOutput& /*output*/) {
  // Nothing to learn: the Consumer forgets an aborted load when it reports it.
}

// ---------------------------------------------------------------------------------------------
// Worker half.

Status WorkerHalf::RegisterKvCache(kv::KvCache* cache, int32_t block_size_logical) {
  if (cache == nullptr) return InvalidArgumentError("RegisterKvCache: null cache");
  KVF_ASSIGN_OR_RETURN(kv::HeadSharding sharding,
                       kv::HeadSharding::Create(cache->spec().num_kv_heads, 1));
  kv::KvCache* const caches[] = {cache};
  return RegisterKvCaches(caches, sharding, block_size_logical);
}

std::optional<kv::CacheMemory> WorkerHalf::CacheMemoryFor(int32_t rank) {
  return c_->registration_.CacheMemoryFor(rank);
}

Status WorkerHalf::RegisterKvCaches(std::span<kv::KvCache* const> rank_caches,
                                    const kv::HeadSharding& sharding, int32_t block_size_logical) {
  return c_->Register(rank_caches, sharding, block_size_logical);
}

void WorkerHalf::BindMetadata(const ConnectorMetadata& metadata) {
  c_->consumer_.Bind(metadata.loads);
  // What a scheduler outside this connector (vLLM's) decided; FerryConnector's own leaves
  // these empty.
  for (const SaveSpec& save : metadata.saves) c_->producer_.QueueSave(save);
  for (const HoldSpec& hold : metadata.holds) c_->producer_.Hold(hold);
  // A split engine's ranks all get the same metadata: its rank 0 speaks for the engine.
  if (c_->registration_.first_rank() != 0) return;
  for (const KvTransferParams& offer : metadata.releases) {
    if (offer.remote_block_ids.empty()) continue;
    c_->ctx_.stats.Update([](ConnectorStats& s) { ++s.notify_only; });
    c_->releaser_.Release(offer);
  }
}

void WorkerHalf::StartLoadKv() {
  if (!c_->registration_.shut_down()) c_->consumer_.Start();
}

void WorkerHalf::AfterForward() {
  if (!c_->registration_.shut_down()) c_->producer_.StageSaves();
}

ConnectorOutput WorkerHalf::GetFinished() {
  if (c_->registration_.shut_down()) return {};
  c_->releaser_.Reap(/*all=*/false);
  ConnectorOutput out;
  c_->consumer_.Start();
  c_->consumer_.Poll(&out);
  c_->producer_.Poll(&out);
  c_->ctx_.stats.Update([refused = c_->registration_.RefusedInbound()](ConnectorStats& s) {
    s.refused_inbound = refused;
  });
  return out;
}

void WorkerHalf::Shutdown() { c_->Shutdown(); }

}  // namespace internal

StatusOr<std::unique_ptr<FerryConnector>> CreateFerryConnector(
    const KvTransferConfig& config, const FerryConnectorOptions& options) {
  if (config.kv_connector != "FerryConnector") {
    return InvalidArgumentError(
        fmt::format("kv_connector '{}' is not FerryConnector", config.kv_connector));
  }
  if (options.tp_size < 1 || options.tp_size > internal::kMaxTpRanks) {
    return InvalidArgumentError(fmt::format("FerryConnectorOptions::tp_size {} outside [1, {}]",
                                            options.tp_size, internal::kMaxTpRanks));
  }
  const int32_t engine_tp = options.engine_tp_size == 0 ? options.tp_size : options.engine_tp_size;
  if (options.first_rank < 0 || engine_tp > internal::kMaxTpRanks ||
      options.first_rank + options.tp_size > engine_tp) {
    return InvalidArgumentError(
        fmt::format("FerryConnectorOptions: ranks [{}, {}) are not within the engine's {} TP ranks",
                    options.first_rank, options.first_rank + options.tp_size, engine_tp));
  }
  std::string engine_id = config.engine_id;
  if (engine_id.empty()) {
    std::random_device rd;
    engine_id = fmt::format("ferry-{}-{:08x}", ::getpid(), rd());
  }
  KVF_ASSIGN_OR_RETURN(internal::SideChannelKeys keys, internal::SideChannelKeys::Load(config));
  // One agent per rank, as vLLM runs one NIXL agent per worker.
  std::vector<std::unique_ptr<transfer::Agent>> agents;
  for (int32_t r = 0; r < options.tp_size; ++r) {
    transfer::AgentOptions agent_options;
    agent_options.name = internal::RankAgentName(engine_id, options.first_rank + r, engine_tp);
    agent_options.backend = config.backend;
    agent_options.ucx.transport = config.ucx_transport;
    // The socket backend listens where the side channel does: the address peers already reach.
    agent_options.socket.listen_host = config.side_channel_host;
    KVF_ASSIGN_OR_RETURN(std::unique_ptr<transfer::Agent> agent,
                         transfer::Agent::Create(agent_options));
    agents.push_back(std::move(agent));
  }
  return std::unique_ptr<FerryConnector>(new internal::FerryConnectorImpl(
      config, options, std::move(engine_id), std::move(agents), std::move(keys)));
}

}  // namespace kvferry::connector
