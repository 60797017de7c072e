#include "kvferry/kv_events/publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "kv_events/block_mirror.h"
#include "kv_events/endpoint.h"
#include "kvferry/common/logging.h"
#include "kvferry/common/thread_annotations.h"

namespace kvferry::kv_events {
namespace {

constexpr int kPollMs = 5;
constexpr auto kStopBudget = std::chrono::seconds(1);

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Publisher::State {
  PublisherOptions options;
  std::string endpoint;
  std::string replay_endpoint;
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t replay{context, zmq::socket_type::router};
  bool has_replay = false;

  Mutex mu;
  std::deque<EventBatch> queue GUARDED_BY(mu);
  std::atomic<bool> stop{false};
  std::thread thread;

  // Thread-owned.
  int64_t next_seq = 0;
  std::deque<std::pair<int64_t, std::string>> buffer;  // (seq, payload), oldest first
  BlockMirror mirror;

  std::atomic<int64_t> published{0}, dropped{0}, replays{0}, snapshots{0}, bad_requests{0},
      blocks_held{0};

  void Run();
  bool SendQueued();
  void Send(const EventBatch& batch);
  void ServeReplay();
  void Reply(const zmq::message_t& client, std::string_view seq, std::string_view payload,
             std::string_view topic);
};

StatusOr<std::unique_ptr<Publisher>> Publisher::Start(const PublisherOptions& options) {
  if (options.buffer_steps < 1 || options.max_queue < 1) {
    return InvalidArgumentError("kv events: buffer_steps and max_queue must be positive");
  }
  auto state = std::make_unique<State>();
  state->options = options;
  state->pub.set(zmq::sockopt::sndhwm, options.send_hwm);
  KVF_ASSIGN_OR_RETURN(state->endpoint, BindEndpoint(state->pub, options.endpoint, "kv events"));
  if (!options.replay_endpoint.empty()) {
    // A ROUTER drops what does not fit its high-water mark: one whole replay must fit.
    state->replay.set(zmq::sockopt::sndhwm,
                      static_cast<int>(std::min<int64_t>(options.buffer_steps + 2, 1 << 30)));
    KVF_ASSIGN_OR_RETURN(state->replay_endpoint,
                         BindEndpoint(state->replay, options.replay_endpoint, "kv events replay"));
    state->has_replay = true;
  }
  {
    // The first batch tells every subscriber that this incarnation starts empty.
    MutexLock lock(&state->mu);
    state->queue.push_back(
        EventBatch{NowSeconds(), {AllBlocksCleared{}}, options.data_parallel_rank});
  }
  State* s = state.get();
  state->thread = std::thread([s] { s->Run(); });
  return std::unique_ptr<Publisher>(new Publisher(std::move(state)));
}

Publisher::Publisher(std::unique_ptr<State> state) : state_(std::move(state)) {}
Publisher::~Publisher() { Stop(); }

void Publisher::Publish(std::vector<Event> events) {
  if (events.empty()) return;
  MutexLock lock(&state_->mu);
  if (static_cast<int64_t>(state_->queue.size()) >= state_->options.max_queue) {
    state_->dropped.fetch_add(1);
    return;
  }
  state_->queue.push_back(
      EventBatch{NowSeconds(), std::move(events), state_->options.data_parallel_rank});
}

const std::string& Publisher::endpoint() const { return state_->endpoint; }
const std::string& Publisher::replay_endpoint() const { return state_->replay_endpoint; }

PublisherStats Publisher::stats() const {
  return PublisherStats{state_->published.load(),    state_->dropped.load(),
                        state_->replays.load(),      state_->snapshots.load(),
                        state_->bad_requests.load(), state_->blocks_held.load()};
}

void Publisher::Stop() {
  if (!state_ || !state_->thread.joinable()) return;
  state_->stop.store(true);
  state_->thread.join();
}

void Publisher::State::Run() {
  std::chrono::steady_clock::time_point stop_by{};
  while (true) {
    try {
      if (has_replay) {
        zmq::pollitem_t item = {replay.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(kPollMs));
        if ((item.revents & ZMQ_POLLIN) != 0) ServeReplay();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      }
      const bool idle = !SendQueued();
      if (stop.load()) {
        if (stop_by == std::chrono::steady_clock::time_point{}) {
          stop_by = std::chrono::steady_clock::now() + kStopBudget;
        }
        if (idle || std::chrono::steady_clock::now() > stop_by) break;
      }
    } catch (const zmq::error_t& e) {
      KVF_LOG_WARN("kv events: {} (zmq errno {})", e.what(), e.num());
      if (stop.load()) break;
    }
  }
  pub.close();
  replay.close();
}

// Sends every queued batch; false when there was none.
bool Publisher::State::SendQueued() {
  std::deque<EventBatch> batches;
  {
    MutexLock lock(&mu);
    batches.swap(queue);
  }
  for (const EventBatch& b : batches) Send(b);
  return !batches.empty();
}

void Publisher::State::Send(const EventBatch& batch) {
  const int64_t seq = next_seq++;
  std::string payload = EncodeEventBatch(batch);
  const std::string seq_frame = EncodeSeq(seq);
  pub.send(zmq::buffer(options.topic), zmq::send_flags::sndmore);
  pub.send(zmq::buffer(seq_frame), zmq::send_flags::sndmore);
  pub.send(zmq::buffer(payload), zmq::send_flags::none);
  for (const Event& e : batch.events) mirror.Apply(e);
  blocks_held.store(mirror.size());
  buffer.emplace_back(seq, std::move(payload));
  while (static_cast<int64_t>(buffer.size()) > options.buffer_steps) buffer.pop_front();
  published.store(next_seq);
}

void Publisher::State::Reply(const zmq::message_t& client, std::string_view seq,
                             std::string_view payload, std::string_view topic) {
  replay.send(zmq::buffer(client.data(), client.size()), zmq::send_flags::sndmore);
  replay.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
  replay.send(zmq::buffer(topic), zmq::send_flags::sndmore);
  replay.send(zmq::buffer(seq), zmq::send_flags::sndmore);
  replay.send(zmq::buffer(payload), zmq::send_flags::none);
}

void Publisher::State::ServeReplay() {
  std::vector<zmq::message_t> frames = RecvFrames(replay, 8);
  // [client id, "", start_seq]
  StatusOr<int64_t> start = frames.size() == 3 && frames[1].size() == 0
                                ? DecodeSeq(frames[2].to_string_view())
                                : InvalidArgumentError("not [id, \"\", start_seq]");
  if (!start.ok()) {
    bad_requests.fetch_add(1);
    KVF_LOG_WARN("kv events: bad replay request ({})", start.status().ToString());
    if (frames.empty()) return;
  } else {
    replays.fetch_add(1);
    // Not covered: the buffer no longer reaches back to start, or start lies beyond anything
    // sent (the subscriber saw an earlier incarnation of this publisher).
    const bool covered = next_seq == 0 || (*start >= buffer.front().first && *start <= next_seq);
    if (!covered) {
      snapshots.fetch_add(1);
      const EventBatch snapshot{NowSeconds(), mirror.Snapshot(), options.data_parallel_rank};
      Reply(frames[0], EncodeSeq(next_seq - 1), EncodeEventBatch(snapshot), options.topic);
    } else {
      for (const auto& [seq, payload] : buffer) {
        if (seq >= *start) Reply(frames[0], EncodeSeq(seq), payload, options.topic);
      }
    }
  }
  Reply(frames[0], EncodeSeq(-1), "", "");
}

}  // namespace kvferry::kv_events
