#include "tools/pull_pair.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "kvferry/connector/ferry_connector.h"
#include "kvferry/engine/engine.h"

namespace kvferry::tools {
namespace {

struct Instance {
  std::unique_ptr<connector::FerryConnector> connector;
  std::unique_ptr<engine::Engine> engine;
};

StatusOr<Instance> MakeInstance(const PullOptions& o, const std::string& id, int tp, bool is_p) {
  connector::KvTransferConfig kv;
  kv.engine_id = id;
  if (o.host_buffer) kv.kv_buffer_device = "cpu";
  KVF_ASSIGN_OR_RETURN(kv.backend, transfer::ParseBackendKind(o.backend));
  Instance inst;
  KVF_ASSIGN_OR_RETURN(inst.connector,
                       connector::CreateFerryConnector(
                           kv, {.model_name = engine::ModelIdentity(o.model), .tp_size = tp}));
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
  ec.connector_scheduler = inst.connector->scheduler();
  ec.connector_worker = inst.connector->worker();
  KVF_ASSIGN_OR_RETURN(inst.engine, engine::Engine::Create(ec));
  return inst;
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

}  // namespace

double PairResult::Median() const {
  std::vector<double> v = pull_us;
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

StatusOr<PairResult> BenchPair(const PullOptions& o, int p_tp, int d_tp) {
  const std::string tag = std::to_string(p_tp) + "-" + std::to_string(d_tp);
  KVF_ASSIGN_OR_RETURN(Instance p, MakeInstance(o, "bench-p-" + tag, p_tp, true));
  KVF_ASSIGN_OR_RETURN(Instance d, MakeInstance(o, "bench-d-" + tag, d_tp, false));
  std::vector<int32_t> prompt = {256};
  for (int i = 1; i < o.prompt_len; ++i) prompt.push_back(32 + (i * 7) % 95);
  engine::SamplingParams sp;
  sp.max_tokens = 1;
  sp.ignore_eos = true;
  PairResult r{p_tp, d_tp, {}, {}};
  for (int rep = 0; rep <= o.reps; ++rep) {  // rep 0: handshake and warm-up, not timed
    const std::string id = "r" + std::to_string(rep);
    connector::KvTransferParams to_p;
    to_p.do_remote_decode = true;
    KVF_RETURN_IF_ERROR(p.engine->AddRequest(id, prompt, sp, to_p));
    KVF_ASSIGN_OR_RETURN(engine::RequestOutput prefilled,
                         Run({p.engine.get()}, p.engine.get(), id, false));
    if (!prefilled.kv_transfer_params) return InternalError("P returned no kv_transfer_params");
    const uint64_t before = d.connector->Stats().duration_us_total;
    // Two tokens: the first is P's (D resumes after it), so D must pull to compute the second.
    engine::SamplingParams d_sp = sp;
    d_sp.max_tokens = 2;
    KVF_RETURN_IF_ERROR(d.engine->AddRequest(id, prompt, d_sp, *prefilled.kv_transfer_params));
    KVF_ASSIGN_OR_RETURN(engine::RequestOutput out,
                         Run({d.engine.get(), p.engine.get()}, d.engine.get(), id, true));
    if (!out.kv_load || out.kv_load->outcome != connector::LoadOutcome::kPulled) {
      return InternalError("the KV was not pulled (" +
                           std::string(out.kv_load
                                           ? connector::LoadOutcomeName(out.kv_load->outcome)
                                           : "no report") +
                           ")");
    }
    if (rep > 0) {
      r.pull_us.push_back(static_cast<double>(d.connector->Stats().duration_us_total - before));
    }
    r.last = *out.kv_load;
  }
  d.connector->worker()->Shutdown();
  p.connector->worker()->Shutdown();
  return r;
}

}  // namespace kvferry::tools
