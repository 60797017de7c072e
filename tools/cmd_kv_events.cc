// `kvferry kv-events`: subscribes to an instance's KV events — kvferry's or vLLM's — and prints
// each batch as one JSON line on stdout, in sequence order, gaps filled by replay
// (docs/kv_events.md). The subscriber's counters go to stderr when it stops.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kvferry/kv_events/subscriber.h"
#include "tools/command_registry.h"
#include "tools/stop_signal.h"

namespace {

using kvferry::kv_events::Event;
using nlohmann::json;

struct KvEventsOptions {
  kvferry::kv_events::SubscriberOptions subscriber;
  int64_t count = 0;  // batches to print; 0: until stopped
  double idle_s = 0;  // stop after this long without a batch; 0: never
};

json EventJson(const Event& event) {
  json j = {{"type", kvferry::kv_events::EventName(event)}};
  if (const auto* s = std::get_if<kvferry::kv_events::BlockStored>(&event)) {
    j["block_hashes"] = s->block_hashes;
    j["parent_block_hash"] = s->parent_block_hash ? json(*s->parent_block_hash) : json(nullptr);
    j["token_ids"] = s->token_ids;
    j["block_size"] = s->block_size;
    j["medium"] = s->medium ? json(*s->medium) : json(nullptr);
  } else if (const auto* r = std::get_if<kvferry::kv_events::BlockRemoved>(&event)) {
    j["block_hashes"] = r->block_hashes;
    j["medium"] = r->medium ? json(*r->medium) : json(nullptr);
  }
  return j;
}

json BatchJson(const kvferry::kv_events::SequencedBatch& b) {
  json events = json::array();
  for (const Event& e : b.batch.events) events.push_back(EventJson(e));
  json j = {{"seq", b.seq}, {"replayed", b.replayed}, {"ts", b.batch.ts}, {"events", events}};
  if (b.batch.data_parallel_rank) j["data_parallel_rank"] = *b.batch.data_parallel_rank;
  return j;
}

int RunKvEvents(const KvEventsOptions& o) {
  kvferry::tools::InstallStopHandlers();
  auto sub = kvferry::kv_events::Subscriber::Connect(o.subscriber);
  if (!sub.ok()) {
    std::fprintf(stderr, "kvferry kv-events: %s\n", sub.status().ToString().c_str());
    return 2;
  }
  int64_t printed = 0;
  double idle = 0;
  int rc = 0;
  while (kvferry::tools::StopSignal() == 0 && (o.count == 0 || printed < o.count)) {
    auto next = (*sub)->Next(/*timeout_ms=*/100);
    if (!next.ok()) {
      std::fprintf(stderr, "kvferry kv-events: %s\n", next.status().ToString().c_str());
      rc = 1;
      break;
    }
    if (!next->has_value()) {
      idle += 0.1;
      if (o.idle_s > 0 && idle >= o.idle_s) break;
      continue;
    }
    idle = 0;
    std::printf("%s\n", BatchJson(**next).dump().c_str());
    std::fflush(stdout);
    ++printed;
  }
  const auto st = (*sub)->stats();
  std::fprintf(stderr,
               "kvferry kv-events: %lld batches, %lld garbage, %lld gaps, %lld replays "
               "(%lld failed), %lld restarts\n",
               static_cast<long long>(st.batches), static_cast<long long>(st.garbage),
               static_cast<long long>(st.gaps), static_cast<long long>(st.replays),
               static_cast<long long>(st.replay_failures), static_cast<long long>(st.restarts));
  return rc;
}

void AddKvEvents(CLI::App& app) {
  auto o = std::make_shared<KvEventsOptions>();
  auto* sub = app.add_subcommand(
      "kv-events",
      "Print an instance's KV events (kvferry's or vLLM's) as JSON lines (docs/kv_events.md)");
  sub->add_option("--endpoint", o->subscriber.endpoint,
                  "The publisher's event socket, tcp://HOST:PORT")
      ->required();
  sub->add_option("--replay-endpoint", o->subscriber.replay_endpoint,
                  "Its replay socket: history (or a snapshot) at start, and gaps filled");
  sub->add_option("--topic", o->subscriber.topic, "Topic prefix to subscribe to")
      ->capture_default_str();
  sub->add_option("--count", o->count, "Stop after this many batches (0: until interrupted)")
      ->capture_default_str();
  sub->add_option("--idle-timeout", o->idle_s,
                  "Stop after this many seconds without a batch (0: never)")
      ->capture_default_str();
  sub->add_option("--replay-timeout-ms", o->subscriber.replay_timeout_ms,
                  "Deadline of one replay request")
      ->capture_default_str();
  sub->callback([o] { throw CLI::RuntimeError(RunKvEvents(*o)); });
}
KVF_REGISTER_COMMAND(AddKvEvents);

}  // namespace
