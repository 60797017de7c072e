#include "kvferry/server/instance.h"

namespace kvferry::server {

StatusOr<std::unique_ptr<Instance>> Instance::Create(InstanceOptions options) {
  std::unique_ptr<Instance> inst(new Instance());
  engine::EngineConfig& ec = options.engine;
  if (options.kv_transfer) {
    connector::FerryConnectorOptions copts;
    copts.model_name = engine::ModelIdentity(ec.model);
    copts.tp_size = ec.tensor_parallel_size;  // one transfer agent per rank
    KVF_ASSIGN_OR_RETURN(inst->connector_,
                         connector::CreateFerryConnector(*options.kv_transfer, copts));
    connector::ConnectorWorker* worker = inst->connector_->worker();
    if (options.wrap_worker) {
      inst->worker_wrapper_ = options.wrap_worker(worker);
      worker = inst->worker_wrapper_.get();
    }
    ec.connector_scheduler = inst->connector_->scheduler();
    ec.connector_worker = worker;
    ec.kv_load_failure_policy = options.kv_transfer->kv_load_failure_policy;
  }
  KVF_ASSIGN_OR_RETURN(inst->engine_, engine::Engine::Create(ec));
  return inst;
}

Instance::~Instance() {
  engine_.reset();
  worker_wrapper_.reset();
  connector_.reset();
}

}  // namespace kvferry::server
