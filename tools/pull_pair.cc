#include "tools/pull_pair.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "bench/common/cold_memcpy.h"
#include "kvferry/common/child_process.h"
#include "kvferry/common/frame_socket.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/engine/engine.h"
#include "kvferry/server/instance.h"

namespace kvferry::tools {
namespace {

StatusOr<std::unique_ptr<server::Instance>> MakeInstance(const PullOptions& o,
                                                         const std::string& id, int tp, bool is_p) {
  connector::KvTransferConfig kv;
  kv.engine_id = id;
  if (o.host_buffer) kv.kv_buffer_device = "cpu";
  kv.cache_in_agent_memory = !o.heap_cache;
  KVF_ASSIGN_OR_RETURN(kv.backend, transfer::ParseBackendKind(o.backend));
  engine::EngineConfig ec;
  ec.model = o.model;
  ec.tensor_parallel_size = tp;
  ec.num_threads = 1;
  ec.block_size = o.block_size;
  ec.attention_backend = o.attention_backend;
  KVF_ASSIGN_OR_RETURN(ec.kv_cache_layout, kv::ParseLayout(o.layout));
  ec.num_kv_blocks = (o.prompt_len + o.block_size - 1) / o.block_size * 2 + 8;
  ec.max_num_batched_tokens = 1024;
  // D pulls every time (no prefix hit); P serves its repeats from its prefix cache.
  ec.enable_prefix_caching = is_p;
  return server::Instance::Create({.engine = ec, .kv_transfer = kv, .wrap_worker = nullptr});
}

// Steps the engines until `id` finished on `watch` (and, with `until_idle`, none has work left:
// P has let go of the blocks); the final output of `id`.
StatusOr<engine::RequestOutput> Run(const std::vector<engine::Engine*>& engines,
                                    engine::Engine* watch, const std::string& id, bool until_idle) {
  const Deadline deadline = Deadline::AfterMs(120000);
  std::optional<engine::RequestOutput> done;
  while (!deadline.Expired()) {
    bool work = false;
    for (engine::Engine* e : engines) {
      if (!e->HasWork()) continue;
      work = true;
      for (engine::RequestOutput& out : e->Step()) {
        if (e == watch && out.request_id == id && out.finished) done = std::move(out);
      }
    }
    if (done.has_value() && (!work || !until_idle)) return *done;
    if (!work) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return DeadlineExceededError("request " + id + " did not finish");
}

std::vector<int32_t> Prompt(const PullOptions& o) {
  std::vector<int32_t> prompt = {256};
  for (int i = 1; i < o.prompt_len; ++i) prompt.push_back(32 + (i * 7) % 95);
  return prompt;
}

// P's side of one rep: prefill `id` (one token) and return the params D needs.
StatusOr<connector::KvTransferParams> PrefillHere(const PullOptions& o, server::Instance& p,
                                                  const std::string& id) {
  engine::SamplingParams sp;
  sp.max_tokens = 1;
  sp.ignore_eos = true;
  connector::KvTransferParams to_p;
  to_p.do_remote_decode = true;
  KVF_RETURN_IF_ERROR(p.engine().AddRequest(id, Prompt(o), sp, to_p));
  KVF_ASSIGN_OR_RETURN(engine::RequestOutput prefilled, Run({&p.engine()}, &p.engine(), id, false));
  if (!prefilled.kv_transfer_params) return InternalError("P returned no kv_transfer_params");
  return *prefilled.kv_transfer_params;
}

// ---- P in a child process (PullOptions::two_process) ----------------------------------------
// Over a socketpair, in frames (common/frame_socket.h): the parent sends request ids; the child
// answers each with P's kv_transfer_params as JSON, or "error: ...". Between requests it steps
// its engine, so it ends leases on D's notifications. "quit" or a closed socket ends it.

[[noreturn]] void ServePrefills(const PullOptions& o, const std::string& name, int tp, int fd) {
  StatusOr<std::unique_ptr<server::Instance>> p = MakeInstance(o, name, tp, true);
  if (!p.ok()) {
    SendFrame(fd, "error: " + p.status().ToString());
    _exit(2);
  }
  SendFrame(fd, "ready");
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, (*p)->engine().HasComputableWork() ? 0 : 1) > 0) {
      std::optional<std::string> id = RecvFrame(fd, Deadline::AfterMs(10000));
      if (!id || *id == "quit") break;
      StatusOr<connector::KvTransferParams> params = PrefillHere(o, **p, *id);
      SendFrame(fd, params.ok() ? connector::ToJson(*params).dump()
                                : "error: " + params.status().ToString());
    }
    if ((*p)->engine().HasWork()) (*p)->engine().Step();
  }
  (*p)->connector()->worker()->Shutdown();
  _exit(0);  // no other destructors: they belong to the parent's state
}

class PrefillChild {
 public:
  static StatusOr<std::unique_ptr<PrefillChild>> Start(const PullOptions& o,
                                                       const std::string& name, int tp) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return InternalError("socketpair failed");
    StatusOr<ChildProcess> child = ChildProcess::Fork([&]() -> int {
      close(sv[0]);
      ServePrefills(o, name, tp, sv[1]);
    });
    close(sv[1]);
    if (!child.ok()) {
      close(sv[0]);
      return InternalError("fork failed");
    }
    std::unique_ptr<PrefillChild> c(new PrefillChild(std::move(*child), sv[0]));
    std::optional<std::string> ready = RecvFrame(c->fd_, Deadline::AfterMs(60000));
    if (ready != "ready") return InternalError("prefill child: " + ready.value_or("no answer"));
    return c;
  }
  ~PrefillChild() {
    SendFrame(fd_, "quit");
    close(fd_);
    child_.WaitOrKill(Deadline::AfterMs(10000));
  }
  StatusOr<connector::KvTransferParams> Prefill(const std::string& id) {
    if (!SendFrame(fd_, id)) return UnavailableError("the prefill child is gone");
    std::optional<std::string> answer = RecvFrame(fd_, Deadline::AfterMs(120000));
    if (!answer) return DeadlineExceededError("no answer from the prefill child");
    nlohmann::json j = nlohmann::json::parse(*answer, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InternalError("prefill child: " + *answer);
    return connector::ParseKvTransferParams(j);
  }

 private:
  PrefillChild(ChildProcess child, int fd) : child_(std::move(child)), fd_(fd) {}
  ChildProcess child_;
  int fd_;
};

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

double PairResult::Median() const { return MedianOf(pull_us); }

StatusOr<PairResult> BenchPair(const PullOptions& o, int p_tp, int d_tp) {
  const std::string tag = std::to_string(p_tp) + "-" + std::to_string(d_tp);
  // P in this process, or in a child forked before D's agents exist.
  std::unique_ptr<server::Instance> p;
  std::unique_ptr<PrefillChild> child;
  if (o.two_process) {
    KVF_ASSIGN_OR_RETURN(child, PrefillChild::Start(o, "bench-p-" + tag, p_tp));
  } else {
    KVF_ASSIGN_OR_RETURN(p, MakeInstance(o, "bench-p-" + tag, p_tp, true));
  }
  KVF_ASSIGN_OR_RETURN(std::unique_ptr<server::Instance> d,
                       MakeInstance(o, "bench-d-" + tag, d_tp, false));
  std::vector<engine::Engine*> engines = {&d->engine()};
  if (p) engines.push_back(&p->engine());
  const std::vector<int32_t> prompt = Prompt(o);
  PairResult r{p_tp, d_tp, {}, {}, 0};
  for (int rep = 0; rep <= o.reps; ++rep) {  // rep 0: handshake and warm-up, not timed
    const std::string id = "r" + std::to_string(rep);
    KVF_ASSIGN_OR_RETURN(connector::KvTransferParams params,
                         child ? child->Prefill(id) : PrefillHere(o, *p, id));
    const uint64_t before = d->connector()->Stats().duration_us_total;
    // Two tokens: the first is P's (D resumes after it), so D must pull to compute the second.
    engine::SamplingParams d_sp;
    d_sp.max_tokens = 2;
    d_sp.ignore_eos = true;
    KVF_RETURN_IF_ERROR(d->engine().AddRequest(id, prompt, d_sp, params));
    KVF_ASSIGN_OR_RETURN(engine::RequestOutput out, Run(engines, &d->engine(), id, true));
    if (!out.kv_load || out.kv_load->outcome != connector::LoadOutcome::kPulled) {
      return InternalError("the KV was not pulled (" +
                           std::string(out.kv_load
                                           ? connector::LoadOutcomeName(out.kv_load->outcome)
                                           : "no report") +
                           ")");
    }
    if (rep > 0) {
      r.pull_us.push_back(static_cast<double>(d->connector()->Stats().duration_us_total - before));
    }
    r.last = *out.kv_load;
  }
  d->connector()->worker()->Shutdown();
  if (p) p->connector()->worker()->Shutdown();
  r.cold_memcpy_us = bench::ColdMemcpyMedianUs(r.last.bytes, r.last.descriptors, o.reps);
  return r;
}

}  // namespace kvferry::tools
