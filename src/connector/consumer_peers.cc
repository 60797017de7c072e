// The Consumer's remote engines: a background handshake per engine, each D rank's connections to
// the P ranks it reads from, and dropping an engine whose transfer failed.
#include <fmt/format.h>

#include "connector/consumer.h"
#include "connector/side_channel.h"
#include "kvferry/common/logging.h"
#include "kvferry/kv/relayout.h"

namespace kvferry::connector::internal {
namespace {

// On a handshake thread: the metadata one side channel serves, checked against what D expects.
StatusOr<std::vector<HandshakeMetadata>> FetchAt(const std::string& host, int32_t port,
                                                 const std::string& expected_engine,
                                                 const std::string& hash,
                                                 const std::optional<CurveClientKeys>& curve,
                                                 const std::string& request,
                                                 const Deadline& deadline) {
  KVF_ASSIGN_OR_RETURN(std::string reply,
                       FetchOverSideChannel(host, port, request, deadline, curve));
  KVF_ASSIGN_OR_RETURN(std::vector<HandshakeMetadata> ranks, DecodeHandshakeReply(reply, hash));
  if (ranks[0].engine_id != expected_engine) {
    return FailedPreconditionError(
        fmt::format("{}:{} is engine '{}', kv_transfer_params named '{}'", host, port,
                    ranks[0].engine_id, expected_engine));
  }
  return ranks;
}

// On a handshake thread: every P rank's metadata, in rank order. `port` is rank 0's side
// channel; an engine whose ranks serve their own (vLLM's TP workers) has rank r's at port + r.
StatusOr<RemoteEngine> FetchRanks(const std::string& host, int32_t port,
                                  const std::string& expected_engine, const std::string& hash,
                                  const StatusOr<std::optional<CurveClientKeys>>& curve,
                                  const std::string& request, const Deadline& deadline) {
  KVF_RETURN_IF_ERROR(curve.status());  // no key for this P: nothing is sent
  KVF_ASSIGN_OR_RETURN(std::vector<HandshakeMetadata> ranks,
                       FetchAt(host, port, expected_engine, hash, *curve, request, deadline));
  if (ranks[0].tp_rank != 0) {
    return FailedPreconditionError(fmt::format(
        "{}:{} serves rank {} of engine '{}'; kv_transfer_params must name rank 0's side channel",
        host, port, ranks[0].tp_rank, expected_engine));
  }
  const int32_t tp = ranks[0].tp_size;
  const bool split = static_cast<int32_t>(ranks.size()) < tp;
  while (static_cast<int32_t>(ranks.size()) < tp) {
    const int32_t next = static_cast<int32_t>(ranks.size());
    KVF_ASSIGN_OR_RETURN(
        std::vector<HandshakeMetadata> more,
        FetchAt(host, port + next, expected_engine, hash, *curve, request, deadline));
    if (more[0].tp_rank != next || more[0].tp_size != tp) {
      return FailedPreconditionError(fmt::format(
          "{}:{} serves rank {} of {}; engine '{}' rank {} of {} was expected there", host,
          port + next, more[0].tp_rank, more[0].tp_size, expected_engine, next, tp));
    }
    ranks.insert(ranks.end(), std::make_move_iterator(more.begin()),
                 std::make_move_iterator(more.end()));
  }
  return RemoteEngine{std::move(ranks), split};
}

}  // namespace

void Consumer::EnsureHandshake(const KvTransferParams& remote) {
  if (peers_.count(remote.remote_engine_id) != 0) return;
  auto job = std::make_shared<HandshakeJob>();
  PeerEntry entry;
  entry.job = job;
  entry.host = remote.remote_host;
  entry.port = remote.remote_port;
  // The thread gets copies: it touches nothing but its job.
  job->thread =
      std::thread([job, host = remote.remote_host, port = remote.remote_port,
                   expected_engine = remote.remote_engine_id, hash = reg_->compat_hash(),
                   curve = ctx_->keys.ForPeer(remote.remote_engine_id, remote.remote_host),
                   request = EncodeHandshakeRequest(0, ctx_->config.auth_token),
                   deadline = Deadline::AfterMs(ctx_->config.handshake_timeout_ms)] {
        StatusOr<RemoteEngine> result =
            FetchRanks(host, port, expected_engine, hash, curve, request, deadline);
        MutexLock lock(&job->mu);
        job->result = std::move(result);
        job->done = true;
      });
  peers_.emplace(remote.remote_engine_id, std::move(entry));
}

// Which P ranks each D rank reads from, and a connection of each D rank's agent to each of
// them; of a `split` P, also the ranks nobody here reads. A failure leaves no connection behind.
Status Consumer::ConnectRanks(PeerEntry& peer, bool split) {
  const int32_t p_tp = static_cast<int32_t>(peer.ranks.size());
  const kv::HeadSharding& own = reg_->sharding();
  StatusOr<kv::HeadSharding> sharding = kv::HeadSharding::Create(own.num_kv_heads(), p_tp);
  if (!sharding.ok() || peer.ranks[0].num_kv_heads != sharding->HeadsPerRank()) {
    return FailedPreconditionError(fmt::format(
        "P's {} ranks hold {} KV heads each; this model's {} KV heads over {} ranks would be {}",
        p_tp, peer.ranks[0].num_kv_heads, own.num_kv_heads(), p_tp,
        sharding.ok() ? sharding->HeadsPerRank() : 0));
  }
  peer.sharding = *sharding;
  peer.links.assign(static_cast<size_t>(reg_->tp_size()),
                    std::vector<std::optional<transfer::PeerHandle>>(p_tp));
  for (const HandshakeMetadata& m : peer.ranks) {
    std::vector<transfer::RegionHandle> regions;
    for (const WireRegion& r : m.regions) regions.push_back({r.id});
    peer.remote_regions.push_back(std::move(regions));
  }
  for (int32_t d = 0; d < reg_->tp_size(); ++d) {
    KVF_ASSIGN_OR_RETURN(std::vector<kv::HeadRead> reads,
                         kv::PlanHeadReads(peer.sharding, own, reg_->EngineRank(d)));
    for (const kv::HeadRead& read : reads) {
      StatusOr<transfer::PeerHandle> link =
          reg_->rank(d).agent->LoadRemoteMetadata(peer.ranks[read.src_rank].agent_metadata);
      if (!link.ok()) {
        for (int32_t dd = 0; dd < reg_->tp_size(); ++dd) {
          for (auto& l : peer.links[dd]) {
            if (l.has_value()) reg_->rank(dd).agent->RemovePeer(*l).IgnoreError();
          }
        }
        return link.status();
      }
      peer.links[d][read.src_rank] = *link;
    }
    peer.reads.push_back(std::move(reads));
  }
  for (int32_t p = 0; p < p_tp && split; ++p) {
    KVF_ASSIGN_OR_RETURN(int32_t readers, kv::CountReaders(peer.sharding, own, p));
    if (readers == 0) peer.unread_ranks.push_back(p);
  }
  return Status::Ok();
}

void Consumer::AdvanceHandshakes() {
  for (auto it = peers_.begin(); it != peers_.end();) {
    PeerEntry& peer = it->second;
    if (peer.state != PeerEntry::State::kHandshaking) {
      ++it;
      continue;
    }
    std::optional<StatusOr<RemoteEngine>> result;
    {
      MutexLock lock(&peer.job->mu);
      if (!peer.job->done) {
        ++it;
        continue;
      }
      result = std::move(peer.job->result);
    }
    peer.job->thread.join();
    peer.job.reset();
    Status st = result->status();
    if (st.ok()) {
      peer.ranks = std::move((*result)->ranks);
      st = ConnectRanks(peer, (*result)->split);
    }
    if (st.ok()) {
      peer.state = PeerEntry::State::kReady;
      ctx_->stats.Update([](ConnectorStats& s) { ++s.handshakes; });
      const HandshakeMetadata& m = peer.ranks[0];
      KVF_LOG_INFO(
          "connector {}: handshake with {} done ({} TP rank(s), kernel block {}, logical {}, "
          "{}{})",
          ctx_->engine_id, it->first, peer.ranks.size(), m.block_size_kernel, m.block_size_logical,
          kv::LayoutName(m.layout), m.host_buffer ? ", host buffer" : "");
      ++it;
      continue;
    }
    // Fail every load waiting for this engine; the next request retries the handshake.
    const std::string engine = it->first;
    it = peers_.erase(it);
    FailWaitingLoads(engine, st);
  }
}

void Consumer::FailWaitingLoads(const std::string& engine, const Status& why) {
  KVF_LOG_WARN("connector {}: handshake with {} failed: {}", ctx_->engine_id, engine,
               why.ToString());
  for (auto& [id, r] : recvs_) {
    if (!r.started && r.spec.remote.remote_engine_id == engine) {
      r.started = true;
      RecordFailure(r, nullptr, LoadOutcome::kFailedHandshake, why);
    }
  }
}

void Consumer::DropPeer(const std::string& engine_id) {
  auto it = peers_.find(engine_id);
  if (it == peers_.end() || it->second.state != PeerEntry::State::kReady) return;
  for (int32_t d = 0; d < static_cast<int32_t>(it->second.links.size()); ++d) {
    for (const auto& link : it->second.links[d]) {
      if (link.has_value()) reg_->rank(d).agent->RemovePeer(*link).IgnoreError();
    }
  }
  peers_.erase(it);
}

}  // namespace kvferry::connector::internal
