"""KvferryConnector: vLLM's KVConnectorBase_V1 over kvferry's C++ connector.

    --kv-transfer-config '{"kv_connector":"KvferryConnector",
                           "kv_connector_module_path":"kvferry.vllm","kv_role":"kv_both",
                           "kv_load_failure_policy":"recompute",
                           "kv_connector_extra_config":{"side_channel_port":5600}}'

vLLM builds one instance per process: role SCHEDULER in the EngineCore (kvferry.vllm.scheduler)
and role WORKER in each Worker (kvferry.vllm.worker, which runs kvferry.ConnectorWorker, the
C++ connector's worker half). This class only routes vLLM's hooks to the half that owns them.
Layer-wise hooks do nothing: a pull lands before the request is scheduled (async load), and
P's blocks are read in place after the request finished (or from the host buffer, staged in
wait_for_save).

Thread-safety: as vLLM drives connectors, each half from its process's engine thread.
"""

from kvferry.vllm.config import parse_config
from kvferry.vllm.metadata import KvferryConnectorMetadata, KvferryStats, KvferryWorkerMetadata
from kvferry.vllm.version import check_vllm_version

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole
from vllm.v1.metrics.cache_hit_source import CacheHitSource


class KvferryConnector(KVConnectorBase_V1):
    _cache_hit_source = CacheHitSource.P2P

    def __init__(self, vllm_config, role, kv_cache_config=None):
        check_vllm_version()
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        cfg = parse_config(ktc.kv_connector_extra_config, ktc.kv_port)
        engine_id = str(ktc.engine_id)
        self._scheduler = self._worker = None
        if role == KVConnectorRole.SCHEDULER:
            from kvferry.vllm.scheduler import KvferryScheduler
            self._scheduler = KvferryScheduler(vllm_config, cfg, engine_id,
                                               _num_blocks(vllm_config, kv_cache_config))
        else:
            from kvferry.vllm.worker import KvferryWorker
            self._worker = KvferryWorker(vllm_config, cfg, engine_id)

    # ---- scheduler side -------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        return self._scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output):
        self._scheduler.update_connector_output(connector_output)

    def request_finished(self, request, block_ids):
        return self._scheduler.request_finished(request, block_ids)

    # ---- worker side ----------------------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        self._worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        if isinstance(meta, KvferryConnectorMetadata):
            self._worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        self._worker.wait_for_save()

    def get_finished(self, finished_req_ids):
        sending, recving = self._worker.get_finished()
        return (sending or None), (recving or None)

    def get_block_ids_with_load_errors(self):
        return self._worker.take_failed_blocks()

    def build_connector_worker_meta(self):
        records = self._worker.take_records()
        return KvferryWorkerMetadata(records) if records else None

    def get_kv_connector_stats(self):
        return self._worker.take_stats() if self._worker is not None else None

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return KvferryStats(data=dict(data)) if data is not None else KvferryStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        from kvferry.vllm.prom import KvferryPromMetrics
        return KvferryPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self):
        if self._worker is not None:
            self._worker.shutdown()


def _num_blocks(vllm_config, kv_cache_config) -> int:
    """The KV cache's blocks, as the scheduler allocates them (the worker's tensors hold as
    many)."""
    n = getattr(kv_cache_config, "num_blocks", None) or vllm_config.cache_config.num_gpu_blocks
    if not n:
        raise ValueError("KvferryConnector: the scheduler knows no KV cache size "
                         "(kv_cache_config.num_blocks, cache_config.num_gpu_blocks)")
    return int(n)
