#include "kvferry/server/engine_loop.h"

#include <algorithm>
#include <chrono>

#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"

namespace kvferry::server {
namespace {

engine::RequestOutput ErrorOutput(const std::string& id, Status status) {
  engine::RequestOutput out;
  out.request_id = id;
  out.finished = true;
  out.finish_reason = engine::FinishReason::kError;
  out.error = std::move(status);
  return out;
}

}  // namespace

EngineLoop::EngineLoop(ServerMetrics* metrics) : metrics_(metrics) {}

EngineLoop::~EngineLoop() { Stop(/*drain_ms=*/0); }

StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Start(EngineLoopOptions options,
                                                        ServerMetrics* metrics) {
  std::unique_ptr<EngineLoop> loop(new EngineLoop(metrics));
  const Deadline deadline = Deadline::AfterMs(options.startup_timeout_ms);
  EngineLoop* self = loop.get();
  loop->thread_ =
      std::thread([self, opts = std::move(options)]() mutable { self->Run(std::move(opts)); });
  Status status;
  {
    MutexLock lock(&self->mu_);
    if (!self->cv_.WaitUntil(&self->mu_, deadline.time_point(),
                             [self]() REQUIRES(self->mu_) { return self->init_done_; })) {
      status = DeadlineExceededError("engine did not start within the startup timeout");
    } else {
      status = self->init_status_;
    }
  }
  if (!status.ok()) {
    loop->stop_requested_ = true;
    loop->cv_.NotifyAll();
    if (loop->thread_.joinable()) loop->thread_.join();
    return status;
  }
  return loop;
}

Status EngineLoop::Init(EngineLoopOptions options) {
  if (options.kv_events) {
    options.engine.record_kv_events = true;
    KVF_ASSIGN_OR_RETURN(kv_events_, kv_events::Publisher::Start(*options.kv_events));
    kv_events_endpoint_ = kv_events_->endpoint();
    kv_events_replay_endpoint_ = kv_events_->replay_endpoint();
  }
  KVF_ASSIGN_OR_RETURN(instance_, Instance::Create({.engine = std::move(options.engine),
                                                    .kv_transfer = std::move(options.kv_transfer),
                                                    .wrap_worker = nullptr}));
  engine_ = &instance_->engine();
  connector_ = instance_->connector();
  max_model_len_ = engine_->max_model_len();
  num_kv_blocks_total_ = engine_->stats().num_blocks_total;
  block_size_logical_ = engine_->block_size_logical();
  prefix_hash_salt_ = engine_->prefix_hash_salt();
  tokenizer_.emplace(engine_->tokenizer());
  if (connector_) engine_id_ = connector_->engine_id();
  return Status::Ok();
}

int32_t EngineLoop::side_channel_port() const {
  return connector_ && running_.load() ? connector_->side_channel_port() : 0;
}

void EngineLoop::Run(EngineLoopOptions options) {
  Status s = Init(std::move(options));
  {
    MutexLock lock(&mu_);
    init_done_ = true;
    init_status_ = s;
    accepting_ = s.ok();
    if (s.ok()) running_ = true;
  }
  cv_.NotifyAll();
  if (!s.ok()) return;

  int64_t last_publish_ms = 0;
  while (true) {
    DrainInbox();
    // Draining ends when no client waits any more (blocks held only for remote readers get a
    // bounded grace period in Shutdown()), or at the drain deadline.
    if (stop_requested_ && (live_.empty() || SteadyNowMs() >= drain_deadline_ms_)) break;
    if (engine_->HasWork()) {
      Dispatch(engine_->Step());
      if (!engine_->HasComputableWork()) {
        MutexLock lock(&mu_);
        cv_.WaitFor(&mu_, std::chrono::milliseconds(1),
                    [this]() REQUIRES(mu_) { return !submissions_.empty() || !aborts_.empty(); });
      }
    } else {
      MutexLock lock(&mu_);
      cv_.WaitFor(&mu_, std::chrono::milliseconds(20), [this]() REQUIRES(mu_) {
        return !submissions_.empty() || !aborts_.empty() || stop_requested_.load();
      });
    }
    if (SteadyNowMs() - last_publish_ms >= 50) {
      PublishStats();
      PublishKvEvents();  // the disk tier commits its writes between steps
      last_publish_ms = SteadyNowMs();
    }
  }
  Shutdown();
}

void EngineLoop::DrainInbox() {
  std::vector<Submission> subs;
  std::vector<std::string> aborts;
  {
    MutexLock lock(&mu_);
    subs.swap(submissions_);
    aborts.swap(aborts_);
  }
  for (Submission& sub : subs) {
    const std::string id = sub.request.request_id;
    Status s = engine_->AddRequest(id, std::move(sub.request.prompt_token_ids), sub.request.params,
                                   std::move(sub.request.kv_transfer_params));
    if (!s.ok()) {
      sub.channel->Push(ErrorOutput(id, s));
      continue;
    }
    live_[id] = std::move(sub.channel);
  }
  for (const std::string& id : aborts) {
    if (live_.count(id)) engine_->Abort(id).IgnoreError();  // NotFound: already finished
  }
}

kv_events::PublisherStats EngineLoop::kv_events_stats() const {
  return kv_events_ ? kv_events_->stats() : kv_events::PublisherStats{};
}

void EngineLoop::PublishKvEvents() {
  if (!kv_events_) return;
  std::vector<kv::BlockEvent> events = engine_->TakeKvEvents();
  if (events.empty()) return;
  std::vector<kv_events::Event> wire;
  wire.reserve(events.size());
  for (const kv::BlockEvent& e : events) {
    wire.push_back(kv_events::ToWire(e, block_size_logical_));
  }
  kv_events_->Publish(std::move(wire));
}

void EngineLoop::Dispatch(std::vector<engine::RequestOutput> outputs) {
  PublishKvEvents();  // before the answers: a router that sees an answer may look for its blocks
  // A client reads /metrics right after its answer: the counters must already include it.
  if (std::any_of(outputs.begin(), outputs.end(),
                  [](const engine::RequestOutput& o) { return o.finished; })) {
    PublishStats();
  }
  for (engine::RequestOutput& out : outputs) {
    auto it = live_.find(out.request_id);
    if (it == live_.end()) continue;
    const bool finished = out.finished;
    it->second->Push(std::move(out));
    if (finished) live_.erase(it);
  }
}

void EngineLoop::PublishStats() {
  if (metrics_ == nullptr) return;
  metrics_->UpdateEngine(engine_->stats());
  if (auto disk = engine_->kv_offload_stats()) metrics_->UpdateKvOffload(*disk);
  if (connector_) metrics_->UpdateConnector(connector_->Stats());
}

void EngineLoop::Shutdown() {
  {
    MutexLock lock(&mu_);
    accepting_ = false;
  }
  DrainInbox();
  for (const auto& [id, channel] : live_) engine_->Abort(id).IgnoreError();
  // Let aborts complete and held blocks be released (leases end by notification or expiry).
  const Deadline deadline = Deadline::AfterMs(2000);
  while (engine_->HasWork() && !deadline.Expired()) {
    Dispatch(engine_->Step());
    if (!engine_->HasComputableWork()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& [id, channel] : live_) {
    channel->Push(ErrorOutput(id, UnavailableError("server is shutting down")));
  }
  live_.clear();
  PublishStats();
  PublishKvEvents();
  if (kv_events_) kv_events_->Stop();
  if (connector_) connector_->worker()->Shutdown();
  engine_ = nullptr;
  connector_ = nullptr;
  instance_.reset();
  running_ = false;
  KVF_LOG_INFO("engine loop stopped");
}

std::shared_ptr<OutputChannel> EngineLoop::Submit(GenerateRequest request) {
  auto channel = std::make_shared<OutputChannel>();
  {
    MutexLock lock(&mu_);
    if (accepting_) {
      submissions_.push_back({std::move(request), channel});
    } else {
      channel->Push(ErrorOutput(request.request_id, UnavailableError("server is shutting down")));
      return channel;
    }
  }
  cv_.NotifyAll();
  return channel;
}

void EngineLoop::Abort(const std::string& request_id) {
  {
    MutexLock lock(&mu_);
    aborts_.push_back(request_id);
  }
  cv_.NotifyAll();
}

void EngineLoop::Stop(int64_t drain_ms) {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    accepting_ = false;
  }
  drain_deadline_ms_ = SteadyNowMs() + drain_ms;
  stop_requested_ = true;
  cv_.NotifyAll();
  thread_.join();
}

}  // namespace kvferry::server
