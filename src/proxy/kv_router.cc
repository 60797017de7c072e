#include "proxy/kv_router.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"
#include "kvferry/common/prometheus_text.h"
#include "kvferry/kv_events/subscriber.h"
#include "proxy/upstream_client.h"

namespace kvferry::proxy {

struct KvRouter::Follower {
  cluster::MemberInfo info;
  std::atomic<bool> stop{false};
  std::thread thread;
};

namespace {

bool SameFeed(const cluster::MemberInfo& a, const cluster::MemberInfo& b) {
  return a.kv_events == b.kv_events && a.kv_events_replay == b.kv_events_replay &&
         a.prefix_hash_salt == b.prefix_hash_salt && a.block_size == b.block_size;
}

}  // namespace

KvRouter::KvRouter(UpstreamAccess upstream, int64_t tokenize_timeout_ms)
    : upstream_(std::move(upstream)), tokenize_timeout_ms_(tokenize_timeout_ms) {}

KvRouter::~KvRouter() { SyncMembers({}); }

void KvRouter::SyncMembers(const std::vector<cluster::MemberInfo>& members) {
  std::map<std::string, const cluster::MemberInfo*> wanted;
  for (const cluster::MemberInfo& m : members) {
    if (!m.kv_events.empty() && m.block_size > 0) wanted[m.id] = &m;
  }
  std::vector<std::unique_ptr<Follower>> gone;
  {
    MutexLock lock(&mu_);
    for (auto it = followers_.begin(); it != followers_.end();) {
      auto w = wanted.find(it->first);
      if (w != wanted.end() && SameFeed(*w->second, it->second->info)) {
        ++it;
        continue;
      }
      index_.RemoveMember(it->first);
      it->second->stop.store(true);
      gone.push_back(std::move(it->second));
      it = followers_.erase(it);
    }
  }
  for (auto& f : gone) f->thread.join();  // outside the lock: a follower applies under it
  MutexLock lock(&mu_);
  urls_.clear();
  for (const auto& [id, m] : wanted) {
    urls_.push_back(m->url);
    if (followers_.count(id) != 0) continue;
    auto f = std::make_unique<Follower>();
    f->info = *m;
    index_.SetMember(id, {m->block_size, m->prefix_hash_salt});
    Follower* raw = f.get();
    f->thread = std::thread([this, raw] { Follow(raw); });
    KVF_LOG_INFO("kv routing: following {} (events {}, block size {})", id, m->kv_events,
                 m->block_size);
    followers_[id] = std::move(f);
  }
}

bool KvRouter::active() const {
  MutexLock lock(&mu_);
  return !followers_.empty();
}

void KvRouter::Follow(Follower* f) {
  kv_events::SubscriberOptions o;
  o.endpoint = f->info.kv_events;
  o.replay_endpoint = f->info.kv_events_replay;
  auto sub = kv_events::Subscriber::Connect(o);
  if (!sub.ok()) {
    KVF_LOG_WARN("kv routing: {}: {}", f->info.id, sub.status().ToString());
    return;
  }
  const std::string& id = f->info.id;
  while (!f->stop.load()) {
    auto next = (*sub)->Next(/*timeout_ms=*/100);
    const kv_events::SubscriberStats st = (*sub)->stats();
    MutexLock lock(&mu_);
    Counters& c = counters_[id];
    c.garbage = st.garbage;
    c.gaps = st.gaps;
    c.replays = st.replays;
    c.restarts = st.restarts;
    if (!next.ok() || !next->has_value()) continue;
    const kv_events::ApplyCounts a = index_.Apply(id, (*next)->batch);
    c.stored += a.stored_blocks;
    c.removed += a.removed_blocks;
    c.cleared += a.cleared;
    c.unknown_removals += a.unknown_removals;
    if (a.refused_block_size + a.refused_hash > 0 && c.refused_block_size + c.refused_hash == 0) {
      KVF_LOG_WARN("kv routing: refusing {}'s events: {} ({})", id,
                   a.refused_hash > 0 ? "block hashes that are not its tokens' chain under its "
                                        "advertised salt (another --prefix-hash-seed or model?)"
                                      : "another block size than it registered",
                   f->info.kv_events);
    }
    c.refused_block_size += a.refused_block_size;
    c.refused_hash += a.refused_hash;
  }
}

StatusOr<std::vector<int32_t>> KvRouter::Tokenize(const std::string& client_body) {
  std::string url;
  {
    MutexLock lock(&mu_);
    if (urls_.empty()) return UnavailableError("no member publishes KV events");
    url = urls_[next_tokenizer_.fetch_add(1) % urls_.size()];
  }
  StatusOr<UpstreamAnswer> r =
      PostJson(url, upstream_, "/tokenize", client_body, tokenize_timeout_ms_);
  const nlohmann::json j = r.ok() && r->status == 200
                               ? nlohmann::json::parse(r->body, nullptr, false)
                               : nlohmann::json();
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    tokenize_failures_.fetch_add(1);
    return UnavailableError(
        fmt::format("tokenize at {}: {}", url,
                    r.ok() ? "HTTP " + std::to_string(r->status) : r.status().ToString()));
  }
  std::vector<int32_t> tokens;
  tokens.reserve(j["tokens"].size());
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer()) return UnavailableError("tokenize at " + url + ": not token ids");
    tokens.push_back(t.get<int32_t>());
  }
  return tokens;
}

std::shared_ptr<const std::map<std::string, int64_t>> KvRouter::Holdings(
    std::span<const int32_t> tokens) const {
  MutexLock lock(&mu_);
  return std::make_shared<const std::map<std::string, int64_t>>(
      index_.MatchedTokens(tokens, SteadyNowMs()));
}

std::map<std::string, int64_t> KvRouter::ConfirmedHoldings(std::span<const int32_t> tokens) const {
  MutexLock lock(&mu_);
  return index_.MatchedTokens(tokens, kv_events::PrefixIndex::kConfirmedOnly);
}

void KvRouter::NoteRouted(const std::string& member, std::span<const int32_t> tokens) {
  MutexLock lock(&mu_);
  index_.Expect(member, tokens, SteadyNowMs(), kExpectMs);
}

void KvRouter::CountPrediction(int64_t predicted, std::optional<int64_t> actual) {
  predictions_.fetch_add(1);
  predicted_tokens_.fetch_add(predicted);
  if (actual) {
    actual_tokens_.fetch_add(*actual);
    if (predicted > 0 && *actual == 0) predictions_missed_.fetch_add(1);
  }
}

std::string KvRouter::RenderMetrics() const {
  PrometheusText w;
  MutexLock lock(&mu_);
  w.Family("kvferry:proxy_kv_index_blocks", "gauge", "Blocks the KV index holds for each member.");
  for (const auto& [id, f] : followers_) {
    w.Sample({{"member", id}}, static_cast<double>(index_.blocks(id)));
  }
  w.Family("kvferry:proxy_kv_events_total", "counter",
           "KV-event blocks applied or refused, per member and kind.");
  for (const auto& [id, c] : counters_) {
    for (const auto& [kind, n] : {std::pair{"stored", c.stored},
                                  {"removed", c.removed},
                                  {"cleared", c.cleared},
                                  {"refused_block_size", c.refused_block_size},
                                  {"refused_hash", c.refused_hash},
                                  {"unknown_removal", c.unknown_removals},
                                  {"garbage", c.garbage}}) {
      w.Sample({{"member", id}, {"kind", kind}}, static_cast<double>(n));
    }
  }
  w.Family("kvferry:proxy_kv_stream_total", "counter",
           "Gaps, replays and restarts seen in members' event streams.");
  for (const auto& [id, c] : counters_) {
    for (const auto& [kind, n] :
         {std::pair{"gap", c.gaps}, {"replay", c.replays}, {"restart", c.restarts}}) {
      w.Sample({{"member", id}, {"kind", kind}}, static_cast<double>(n));
    }
  }
  w.Family("kvferry:proxy_kv_tokenize_failures_total", "counter",
           "Prompts kv routing could not tokenize.");
  w.Sample({}, static_cast<double>(tokenize_failures_.load()));
  w.Family("kvferry:proxy_kv_prefix_tokens_total", "counter",
           "Prefill legs' prompt tokens the index predicted cached, and that P reported cached.");
  w.Sample({{"kind", "predicted"}}, static_cast<double>(predicted_tokens_.load()));
  w.Sample({{"kind", "actual"}}, static_cast<double>(actual_tokens_.load()));
  w.Family("kvferry:proxy_kv_predictions_total", "counter",
           "Prefill legs routed with the index, and those predicted a hit whose P cached nothing.");
  w.Sample({{"kind", "all"}}, static_cast<double>(predictions_.load()));
  w.Sample({{"kind", "missed"}}, static_cast<double>(predictions_missed_.load()));
  return w.Take();
}

}  // namespace kvferry::proxy
