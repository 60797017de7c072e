// Subscriber: one publisher's KV events in sequence order, gaps filled by replay
// (docs/kv_events.md). Reads kvferry's Publisher and vLLM's ZmqEventPublisher alike.
//
// Connect() subscribes to `endpoint` (SUB) and at once asks the replay socket for everything from
// seq 0, which a kvferry publisher answers with its history or a snapshot: a subscriber that
// (re)starts learns what the publisher holds without waiting for new events.
// Next() returns batches in seq order. A live batch after a gap (seq beyond the next expected)
// makes it replay from the expected seq first; a live seq that goes back (other than the batches a
// replay has just delivered) means the publisher restarted, and it replays from 0. A replay gets
// its own DEALER socket and `replay_timeout_ms`; one that fails or leaves a gap is counted, and the
// stream goes on from the live batch (the consumer's view of that publisher may then be stale —
// what the counters are for). Live batches that a replay already delivered are skipped. A stream
// quiet for `catch_up_ms` is asked for anything newer than what was seen (PUB drops what a slow
// subscriber cannot take, and the last batches of a burst have no successor to show the gap). A
// batch that does not decode (bad frames, bad msgpack) is counted and skipped; its seq still counts
// as seen, so garbage cannot start a replay storm. Messages over 64 MiB are refused by the socket.
//
// Thread-safety: one thread calls Next() (and stats(), which is also safe from others).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/kv_events/event_wire.h"

namespace kvferry::kv_events {

struct SubscriberOptions {
  std::string endpoint;         // the publisher's PUB socket, tcp://HOST:PORT
  std::string replay_endpoint;  // its ROUTER socket; "": no replay (gaps are only counted)
  std::string topic;            // prefix filter ("" all)
  int64_t replay_timeout_ms = 2000;
  // After this long without a live batch, ask the replay socket for anything newer: a batch lost
  // at the end of a burst has no successor to reveal its gap. 0: never.
  int64_t catch_up_ms = 1000;
};

struct SequencedBatch {
  int64_t seq = 0;
  bool replayed = false;  // came through the replay socket
  EventBatch batch;
};

struct SubscriberStats {
  int64_t batches = 0;          // returned by Next()
  int64_t garbage = 0;          // messages that did not decode
  int64_t gaps = 0;             // gaps seen in the live stream
  int64_t replays = 0;          // replay requests made
  int64_t replay_failures = 0;  // replays that timed out or left a gap
  int64_t restarts = 0;         // the publisher's seq went back
  int64_t stale = 0;            // live batches skipped because a replay had delivered them
};

class Subscriber {
 public:
  // InvalidArgument for a malformed endpoint. The first replay runs inside Connect (bounded by
  // replay_timeout_ms; a publisher not up yet is a replay failure, not an error).
  static StatusOr<std::unique_ptr<Subscriber>> Connect(const SubscriberOptions& options);
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // The next batch in order, waiting up to `timeout_ms`; nullopt when none came in time.
  // Unavailable only for a socket error.
  StatusOr<std::optional<SequencedBatch>> Next(int64_t timeout_ms);

  SubscriberStats stats() const;

 private:
  struct Sockets;
  Subscriber(SubscriberOptions options, std::unique_ptr<Sockets> sockets);
  // Replays from `from` into pending_; false when it failed or did not reach `from`.
  bool Replay(int64_t from);
  void Accept(int64_t seq, std::string_view payload, bool replayed);

  SubscriberOptions options_;
  std::unique_ptr<Sockets> sockets_;
  std::deque<SequencedBatch> pending_;
  int64_t next_seq_ = -1;  // -1: nothing seen yet
  // Live seqs in [stale_floor_, next_seq_) were delivered by the last replay; a live seq below
  // stale_floor_ means the publisher restarted.
  int64_t stale_floor_ = 0;
  int64_t catch_up_at_ms_ = 0;  // steady-clock ms of the next catch-up replay
  std::atomic<int64_t> batches_{0}, garbage_{0}, gaps_{0}, replays_{0}, replay_failures_{0},
      restarts_{0}, stale_{0};
};

}  // namespace kvferry::kv_events
