// kvferry.ConnectorWorker: one tensor-parallel rank's worker half of kvferry's C++ connector
// (kvferry/connector/ferry_connector.h) for an engine whose scheduler is not kvferry's — vLLM's
// (python/kvferry/vllm/worker.py). The rank's KV cache is the engine's own memory, borrowed
// (kv::KvCache::Borrow) and registered with the connector's transfer agent; the connector then
// serves P's side channel, stages the host buffer, leases P's blocks, handshakes with P in the
// background, plans and posts D's pulls, checks P's lease generations and re-lays out pages of
// another block size, exactly as under kvferry's own engine.
//
// Per engine step (the engine thread; each call releases the GIL while the connector works):
// load()/save()/hold()/release() queue what the engine's scheduler decided, start_load_kv()
// binds and starts it, after_forward() stages host-buffer saves, get_finished() reports.
// Block ids are kvferry.LogicalBlockId (a KernelBlockId or an int raises TypeError);
// kv_transfer_params cross as JSON text, parsed by the connector's own parser.
#include "connector_bindings.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kvferry/connector/ferry_connector.h"
#include "kvferry/connector/kv_transfer_params.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/head_sharding.h"
#include "status_error.h"

namespace nb = nanobind;

namespace kvferry::python {
namespace {

using connector::ConnectorMetadata;
using connector::ConnectorOutput;
using connector::KvTransferParams;
using kv::LogicalBlockId;

KvTransferParams ParamsOf(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw StatusError(InvalidArgumentError("kv_transfer_params: not JSON"));
  return ValueOrThrow(connector::ParseKvTransferParams(j));
}

nb::dict ReportDict(const connector::LoadReport& r) {
  nb::dict d;
  d["request_id"] = r.request_id;
  d["outcome"] = std::string(connector::LoadOutcomeName(r.outcome));
  d["tokens"] = r.tokens;
  d["bytes"] = r.bytes;
  d["descriptors"] = r.descriptors;
  d["bytes_by_memcpy"] = r.bytes_by_memcpy;
  d["pull_ms"] = r.pull_ms;
  d["staged"] = r.staged;
  d["error"] = r.error;
  return d;
}

nb::dict StatsDict(const connector::ConnectorStats& s) {
  nb::dict d;
  d["transfers"] = s.transfers;
  d["tokens"] = s.tokens;
  d["bytes"] = s.bytes;
  d["descriptors"] = s.descriptors;
  d["bytes_by_memcpy"] = s.bytes_by_memcpy;
  d["notifications_sent"] = s.notifications_sent;
  d["notify_only"] = s.notify_only;
  d["handshakes"] = s.handshakes;
  d["failures_handshake"] = s.failures_handshake;
  d["failures_transfer"] = s.failures_transfer;
  d["failures_deadline"] = s.failures_deadline;
  d["failures_generation"] = s.failures_generation;
  d["leases_granted"] = s.leases_granted;
  d["leases_released_by_notification"] = s.leases_released_by_notification;
  d["leases_expired"] = s.leases_expired;
  d["notifications_before_hold"] = s.notifications_before_hold;
  d["releases_before_hold"] = s.releases_before_hold;
  d["notifications_late"] = s.notifications_late;
  d["notifications_duplicate"] = s.notifications_duplicate;
  d["blocks_held"] = s.blocks_held;
  d["staged_kernel_blocks"] = s.staged_kernel_blocks;
  d["stage_failures"] = s.stage_failures;
  nb::dict refused;
  for (const auto& [reason, n] : s.refused_inbound) refused[reason.c_str()] = n;
  d["refused_inbound"] = refused;
  return d;
}

class PyConnectorWorker {
 public:
  PyConnectorWorker(const std::string& config_json, const std::string& model_name, int32_t tp_rank,
                    int32_t tp_size) {
    connector::KvTransferConfig config =
        ValueOrThrow(connector::ParseKvTransferConfig(config_json));
    connector::FerryConnectorOptions options;
    options.model_name = model_name;
    options.external_scheduler = true;
    options.first_rank = tp_rank;
    options.engine_tp_size = tp_size;
    conn_ = ValueOrThrow(connector::CreateFerryConnector(config, options));
    tp_size_ = tp_size;
  }

  void RegisterKvCache(const kv::CacheSpec& spec, const std::vector<uintptr_t>& regions,
                       int32_t block_size_logical, int32_t model_kv_heads) {
    if (cache_ != nullptr) {
      throw StatusError(FailedPreconditionError("register_kv_cache called twice"));
    }
    std::vector<kv::RegionView> views;
    for (uintptr_t a : regions) {
      if (a == 0) throw StatusError(InvalidArgumentError("a region address is 0"));
      views.push_back({reinterpret_cast<std::byte*>(a), spec.region_bytes()});
    }
    std::unique_ptr<kv::KvCache> cache = ValueOrThrow(kv::KvCache::Borrow(spec, std::move(views)));
    // The engine's KV heads over its TP ranks; this rank's cache holds its share.
    const kv::HeadSharding sharding = ValueOrThrow(kv::HeadSharding::Create(
        model_kv_heads == 0 ? spec.num_kv_heads : model_kv_heads, tp_size_));
    kv::KvCache* const caches[] = {cache.get()};
    nb::gil_scoped_release unlocked;
    ThrowIfError(conn_->worker()->RegisterKvCaches(caches, sharding, block_size_logical));
    cache_ = std::move(cache);
  }

  void Load(const std::string& request_id, const std::string& params_json,
            const std::vector<LogicalBlockId>& local_block_ids, int32_t num_local_computed_tokens,
            int32_t num_external_tokens) {
    pending_.loads.push_back({request_id, ParamsOf(params_json), local_block_ids,
                              num_local_computed_tokens, num_external_tokens});
  }
  void Save(const std::string& request_id, const std::vector<LogicalBlockId>& block_ids,
            int32_t token_begin, int32_t token_end) {
    pending_.saves.push_back({request_id, block_ids, token_begin, token_end});
  }
  void Hold(const std::string& request_id, const std::vector<LogicalBlockId>& block_ids,
            const std::vector<uint64_t>& generations) {
    if (!generations.empty() && generations.size() != block_ids.size()) {
      throw StatusError(InvalidArgumentError("hold: one generation per block, or none"));
    }
    pending_.holds.push_back({request_id, block_ids, generations});
  }
  void Release(const std::string& params_json) {
    pending_.releases.push_back(ParamsOf(params_json));
  }

  void StartLoadKv() {
    ConnectorMetadata meta = std::move(pending_);
    pending_ = ConnectorMetadata();
    nb::gil_scoped_release unlocked;
    conn_->worker()->BindMetadata(meta);
    conn_->worker()->StartLoadKv();
  }
  void AfterForward() {
    nb::gil_scoped_release unlocked;
    conn_->worker()->AfterForward();
  }

  nb::dict GetFinished() {
    ConnectorOutput out;
    {
      nb::gil_scoped_release unlocked;
      out = conn_->worker()->GetFinished();
    }
    nb::list reports;
    for (const connector::LoadReport& r : out.load_reports) reports.append(ReportDict(r));
    nb::dict d;
    d["finished_sending"] = out.finished_sending;
    d["finished_recving"] = out.finished_recving;
    d["invalid_block_ids"] = out.invalid_block_ids;
    d["load_reports"] = reports;
    return d;
  }

  nb::dict Stats() const { return StatsDict(conn_->Stats()); }
  int32_t SideChannelPort() const { return conn_->side_channel_port(); }
  const std::string& EngineId() const { return conn_->engine_id(); }
  void Shutdown() {
    nb::gil_scoped_release unlocked;
    conn_->worker()->Shutdown();
  }

 private:
  std::unique_ptr<kv::KvCache> cache_;  // declared first: the connector goes before the view
  int32_t tp_size_ = 1;                 // the engine's TP size
  std::unique_ptr<connector::FerryConnector> conn_;
  ConnectorMetadata pending_;  // queued by load/save/hold/release for start_load_kv
};

}  // namespace

void RegisterConnector(nb::module_& m) {
  nb::class_<PyConnectorWorker>(
      m, "ConnectorWorker",
      "One TP rank's worker half of kvferry's C++ connector, for an engine whose scheduler is "
      "not kvferry's (vLLM's). The config is kvferry's --kv-transfer-config JSON "
      "(kv_connector FerryConnector); model_name enters the handshake's compatibility hash.")
      .def(nb::init<const std::string&, const std::string&, int32_t, int32_t>(),
           nb::arg("kv_transfer_config"), nb::arg("model_name"), nb::arg("tp_rank") = 0,
           nb::arg("tp_size") = 1,
           "tp_rank of tp_size: the engine's TP rank this worker is (one per process). P's "
           "rank r serves its side channel on the configured port + r.")
      .def("register_kv_cache", &PyConnectorWorker::RegisterKvCache, nb::arg("spec"),
           nb::arg("regions"), nb::arg("block_size_logical"), nb::arg("model_kv_heads") = 0,
           "Borrows this rank's cache (one base address per region of spec, each "
           "spec.region_bytes long, 64-byte aligned, alive as long as this object) and "
           "registers it; P then serves its side channel. model_kv_heads: the model's KV heads "
           "(0: spec.num_kv_heads, at TP 1), which tp_size ranks share. Once.")
      .def("load", &PyConnectorWorker::Load, nb::arg("request_id"), nb::arg("kv_transfer_params"),
           nb::arg("local_block_ids"), nb::arg("num_local_computed_tokens"),
           nb::arg("num_external_tokens"),
           "D: pull tokens [num_local_computed_tokens, +num_external_tokens) of P's offer (its "
           "kv_transfer_params, JSON) into local_block_ids (all of the request's blocks).")
      .def("save", &PyConnectorWorker::Save, nb::arg("request_id"), nb::arg("block_ids"),
           nb::arg("token_begin"), nb::arg("token_end"),
           "P, host buffer: stage these computed tokens in after_forward().")
      .def("hold", &PyConnectorWorker::Hold, nb::arg("request_id"), nb::arg("block_ids"),
           nb::arg("generations"),
           "P: lease a finished request's blocks until D's notification or the lease time; "
           "generations are the ones promised to D (ended at once if this table differs).")
      .def("release", &PyConnectorWorker::Release, nb::arg("kv_transfer_params"),
           "D: P's offer is not needed: tell P to end the lease now.")
      .def("start_load_kv", &PyConnectorWorker::StartLoadKv,
           "Binds what was queued and starts the pulls (non-blocking).")
      .def("after_forward", &PyConnectorWorker::AfterForward)
      .def("get_finished", &PyConnectorWorker::GetFinished,
           "{'finished_sending', 'finished_recving', 'invalid_block_ids', 'load_reports'} since "
           "the last call.")
      .def("stats", &PyConnectorWorker::Stats, "The connector's counters since creation.")
      .def_prop_ro("side_channel_port", &PyConnectorWorker::SideChannelPort)
      .def_prop_ro("engine_id", &PyConnectorWorker::EngineId)
      .def("shutdown", &PyConnectorWorker::Shutdown);
}

}  // namespace kvferry::python
