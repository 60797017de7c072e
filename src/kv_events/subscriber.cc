#include "kvferry/kv_events/subscriber.h"

#include <fmt/format.h>

#include <chrono>
#include <vector>
#include <zmq.hpp>

#include "kv_events/endpoint.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"

namespace kvferry::kv_events {
namespace {

constexpr int64_t kMaxMessageBytes = int64_t{64} << 20;

bool Readable(zmq::socket_t& socket, int64_t wait_ms) {
  zmq::pollitem_t item = {socket.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0)));
  return (item.revents & ZMQ_POLLIN) != 0;
}

// Whether a payload is a batch whose first event is AllBlocksCleared (a snapshot, or seq 0).
bool StartsWithClear(std::string_view payload) {
  StatusOr<EventBatch> b = DecodeEventBatch(payload);
  return b.ok() && !b->events.empty() && std::holds_alternative<AllBlocksCleared>(b->events[0]);
}

}  // namespace

struct Subscriber::Sockets {
  zmq::context_t context{1};
  zmq::socket_t sub{context, zmq::socket_type::sub};
};

StatusOr<std::unique_ptr<Subscriber>> Subscriber::Connect(const SubscriberOptions& options) {
  KVF_RETURN_IF_ERROR(CheckEndpoint(options.endpoint, "kv events subscriber"));
  if (!options.replay_endpoint.empty()) {
    KVF_RETURN_IF_ERROR(CheckEndpoint(options.replay_endpoint, "kv events replay"));
  }
  auto sockets = std::make_unique<Sockets>();
  try {
    sockets->sub.set(zmq::sockopt::linger, 0);
    sockets->sub.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
    sockets->sub.set(zmq::sockopt::subscribe, options.topic);
    sockets->sub.connect(options.endpoint);
  } catch (const zmq::error_t& e) {
    return UnavailableError(
        fmt::format("kv events: cannot connect to {}: {}", options.endpoint, e.what()));
  }
  std::unique_ptr<Subscriber> s(new Subscriber(options, std::move(sockets)));
  if (!options.replay_endpoint.empty()) s->Replay(0);
  return s;
}

Subscriber::Subscriber(SubscriberOptions options, std::unique_ptr<Sockets> sockets)
    : options_(std::move(options)), sockets_(std::move(sockets)) {}

Subscriber::~Subscriber() = default;

SubscriberStats Subscriber::stats() const {
  return SubscriberStats{batches_.load(),         garbage_.load(),  gaps_.load(), replays_.load(),
                         replay_failures_.load(), restarts_.load(), stale_.load()};
}

void Subscriber::Accept(int64_t seq, std::string_view payload, bool replayed) {
  next_seq_ = seq + 1;
  if (!replayed) stale_floor_ = next_seq_;  // past the replayed range: going back is a restart
  StatusOr<EventBatch> batch = DecodeEventBatch(payload);
  if (!batch.ok()) {
    garbage_.fetch_add(1);
    KVF_LOG_WARN("kv events from {}: seq {} skipped: {}", options_.endpoint, seq,
                 batch.status().ToString());
    return;
  }
  pending_.push_back(SequencedBatch{seq, replayed, std::move(batch).value()});
}

bool Subscriber::Replay(int64_t from) {
  replays_.fetch_add(1);
  stale_floor_ = from;
  if (options_.replay_endpoint.empty()) {
    replay_failures_.fetch_add(1);
    return false;
  }
  const Deadline deadline = Deadline::AfterMs(options_.replay_timeout_ms);
  bool ended = false;
  bool reached = false;
  try {
    zmq::socket_t dealer(sockets_->context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
    dealer.connect(options_.replay_endpoint);
    const std::string start = EncodeSeq(from);
    dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(start), zmq::send_flags::none);
    while (!ended && Readable(dealer, deadline.RemainingMs())) {
      std::vector<zmq::message_t> f = RecvFrames(dealer, 5);
      StatusOr<int64_t> seq = f.size() == 4 ? DecodeSeq(f[2].to_string_view())
                                            : InvalidArgumentError("not [\"\", topic, seq, data]");
      if (!seq.ok()) {
        garbage_.fetch_add(1);
        continue;
      }
      if (*seq < 0) {
        ended = true;
        continue;
      }
      if (next_seq_ >= 0 && *seq < next_seq_) {
        if (!StartsWithClear(f[3].to_string_view())) continue;
        restarts_.fetch_add(1);  // a snapshot from behind: a new incarnation of the publisher
      }
      const size_t before = pending_.size();
      Accept(*seq, f[3].to_string_view(), /*replayed=*/true);
      const bool clears = pending_.size() > before && !pending_.back().batch.events.empty() &&
                          std::holds_alternative<AllBlocksCleared>(pending_.back().batch.events[0]);
      reached = reached || *seq <= from || clears;
    }
  } catch (const zmq::error_t& e) {
    KVF_LOG_WARN("kv events replay from {}: {}", options_.replay_endpoint, e.what());
  }
  const bool ok = ended && (reached || next_seq_ < 0 || next_seq_ <= from);
  if (!ok) replay_failures_.fetch_add(1);
  return ok;
}

StatusOr<std::optional<SequencedBatch>> Subscriber::Next(int64_t timeout_ms) {
  const Deadline deadline = Deadline::AfterMs(timeout_ms);
  const bool catch_up = options_.catch_up_ms > 0 && !options_.replay_endpoint.empty();
  if (catch_up && catch_up_at_ms_ == 0) catch_up_at_ms_ = SteadyNowMs() + options_.catch_up_ms;
  try {
    while (pending_.empty()) {
      int64_t wait = deadline.RemainingMs();
      if (catch_up) wait = std::min(wait, std::max<int64_t>(catch_up_at_ms_ - SteadyNowMs(), 0));
      if (!Readable(sockets_->sub, wait)) {
        if (catch_up && SteadyNowMs() >= catch_up_at_ms_) {
          Replay(std::max<int64_t>(next_seq_, 0));
          catch_up_at_ms_ = SteadyNowMs() + options_.catch_up_ms;
          continue;
        }
        if (deadline.Expired()) break;
        continue;
      }
      if (catch_up) catch_up_at_ms_ = SteadyNowMs() + options_.catch_up_ms;
      std::vector<zmq::message_t> f = RecvFrames(sockets_->sub, 4);
      StatusOr<int64_t> seq = f.size() == 3 ? DecodeSeq(f[1].to_string_view())
                                            : InvalidArgumentError("not [topic, seq, data]");
      if (!seq.ok() || *seq < 0) {
        garbage_.fetch_add(1);
        continue;
      }
      if (next_seq_ >= 0 && *seq < next_seq_) {
        if (*seq >= stale_floor_) {
          stale_.fetch_add(1);
          continue;
        }
        restarts_.fetch_add(1);
        next_seq_ = 0;
        if (*seq > 0) Replay(0);
      } else if (next_seq_ >= 0 && *seq > next_seq_) {
        gaps_.fetch_add(1);
        Replay(next_seq_);
      } else if (next_seq_ < 0 && *seq > 0) {
        Replay(0);
      }
      if (next_seq_ < 0 || *seq >= next_seq_) {
        Accept(*seq, f[2].to_string_view(), /*replayed=*/false);
      } else {
        stale_.fetch_add(1);
      }
    }
  } catch (const zmq::error_t& e) {
    return UnavailableError(fmt::format("kv events from {}: {}", options_.endpoint, e.what()));
  }
  if (pending_.empty()) return std::optional<SequencedBatch>();
  SequencedBatch b = std::move(pending_.front());
  pending_.pop_front();
  batches_.fetch_add(1);
  return std::optional<SequencedBatch>(std::move(b));
}

}  // namespace kvferry::kv_events
