// Publisher: an instance's KV events on ZeroMQ, as vLLM's ZmqEventPublisher sends them
// (event_wire.h), with a replay socket and a snapshot (docs/kv_events.md).
//
// PUB socket (`endpoint`, bound): every batch as [topic, seq, payload], seq counting from 0. The
// first batch of every publisher is [AllBlocksCleared]: a subscriber that sees seq 0 again knows
// the instance restarted with an empty cache.
// ROUTER socket (`replay_endpoint`, bound; optional): a request [start_seq] (8 bytes, big-endian,
// after a REQ-style empty delimiter) is answered with the buffered batches from start_seq on,
// each [topic, seq, payload], then the end marker ["", -1, ""]. When the buffer no longer reaches
// back to start_seq, or start_seq lies beyond the next seq (the asker followed an earlier
// incarnation), the answer is instead one snapshot batch at the last seq sent:
// [AllBlocksCleared, BlockStored of every block held now...] — so a subscriber that restarted,
// or lost more than the buffer holds, still resyncs. (vLLM answers such a request with what its
// buffer has; the snapshot is kvferry's addition, a normal batch to vLLM's decoder.)
// The publisher knows what blocks are held from the events it sent (a mirror of the pool's
// cached entries), so snapshots never touch the engine.
//
// Endpoints are tcp://HOST:PORT; PORT 0 binds an ephemeral port (endpoint() says which). Unlike
// vLLM, which connects when the host is not a wildcard, this publisher always binds.
//
// Thread-safety: Publish, stats and the accessors from any thread; Start/Stop from the owner.
// One thread of its own sends, answers replays and keeps the mirror.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv_events/event_wire.h"

namespace kvferry::kv_events {

struct PublisherOptions {
  std::string endpoint;          // tcp://HOST:PORT
  std::string replay_endpoint;   // "": no replay socket
  std::string topic;             // first frame of every message ("" as vLLM's default)
  int64_t buffer_steps = 10000;  // batches kept for replay
  int64_t max_queue = 100000;    // batches waiting for the thread; more are dropped, counted
  int32_t send_hwm = 100000;     // ZeroMQ's high-water mark of the PUB socket (vLLM's `hwm`)
  int64_t data_parallel_rank = 0;
};

struct PublisherStats {
  int64_t published = 0;  // batches sent (the next seq)
  int64_t dropped = 0;    // batches refused because the queue was full
  int64_t replays = 0;    // replay requests answered
  int64_t snapshots = 0;  // of which answered with a snapshot
  int64_t bad_replay_requests = 0;
  int64_t blocks_held = 0;  // blocks in the mirror
};

class Publisher {
 public:
  // Binds both sockets and starts the thread. InvalidArgument for a malformed endpoint or
  // option, Unavailable when an address cannot be bound.
  static StatusOr<std::unique_ptr<Publisher>> Start(const PublisherOptions& options);
  ~Publisher();  // Stop()
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Queues one batch (the time is taken now). Never blocks; empty `events` sends nothing.
  void Publish(std::vector<Event> events);

  const std::string& endpoint() const;         // as bound (the port filled in)
  const std::string& replay_endpoint() const;  // as bound; "" without replay
  PublisherStats stats() const;

  // Sends what is queued (at most ~1 s more), then closes the sockets. Idempotent.
  void Stop();

 private:
  struct State;
  explicit Publisher(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvferry::kv_events
