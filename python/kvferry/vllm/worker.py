"""KvferryConnector's worker half (vLLM's Worker process, one per TP rank): kvferry's C++
connector over vLLM's KV tensors.

Each rank runs one :class:`kvferry.ConnectorWorker`, the worker half of kvferry's C++
``FerryConnector`` (the code kvferry's own engine runs), over its rank's KV heads: vLLM's
per-layer tensors are borrowed as a ``VLLM_CPU`` or ``VLLM_CPU_AMX`` cache (kvferry's names for
vLLM's CPU page as its vec and AMX attention ISAs pack it) and registered with the connector's
transfer agent. The connector then does everything
between P and D:

* P: serves its side channel (ZeroMQ, the versioned msgpack handshake with its compatibility
  hash; CURVE when configured) on ``side_channel_port + rank``; leases the blocks of each
  finished request the scheduler ships as a hold (checking that its lease table gives the
  generations the scheduler promised D); ends a lease on D's notification, D's release, or
  expiry, and reports it in finished_sending so vLLM frees the blocks.
* D: handshakes with P in the background; plans each pull (logical -> kernel ids on both
  sides, coalesced descriptors); posts the data READ with a deadline, then the READ of P's
  generations carrying the notification; keeps the bytes only if every generation is the one
  promised; pulls a P of another block size into staging and re-lays it out into D's blocks;
  reports each load (pulled, or failed with its logical blocks, which vLLM recomputes).

This module only translates: vLLM's metadata into the connector's calls, its output into
vLLM's (finished sets, failed block ids, per-request records, stats).

Thread-safety: vLLM calls every method from the model runner's thread; the connector's own
threads (side channel, handshakes, releases) touch only what the connector guards.
"""

import json

import kvferry
from kvferry import LogicalBlockId
from kvferry.vllm.config import ConnectorConfig
from kvferry.vllm.layout import attention_isa, cache_of_kv_caches
from kvferry.vllm.metadata import KvferryConnectorMetadata, KvferryStats

from vllm.logger import init_logger

# Under "vllm." so that vLLM's logging config (handlers, VLLM_LOGGING_LEVEL) applies.
logger = init_logger("vllm.kvferry." + __name__.rsplit(".", 1)[-1])


def connector_config(cfg: ConnectorConfig, engine_id: str, tp_rank: int,
                     host_buffer: bool) -> str:
    """kvferry's --kv-transfer-config (include/kvferry/connector/kv_transfer_config.h) for one
    rank: its side channel on side_channel_port + rank."""
    return json.dumps({
        "kv_connector": "FerryConnector", "kv_role": "kv_both", "engine_id": engine_id,
        "kv_load_failure_policy": "recompute",
        "kv_buffer_device": "cpu" if host_buffer else "direct",
        "kv_connector_extra_config": {
            "side_channel_host": cfg.side_channel_host,
            "side_channel_port": cfg.side_channel_port + tp_rank,
            "lease_ms": max(1, int(cfg.lease_timeout_s * 1000)),
            "handshake_timeout_ms": cfg.handshake_timeout_ms,
            "transfer_timeout_ms": cfg.load_timeout_ms,
            "backend": cfg.backend, "ucx_transport": cfg.ucx_transport,
            **{key: getattr(cfg, key) for key in _ACCESS_KEYS if getattr(cfg, key)}}})


# Side-channel access settings passed to kvferry's connector as they are.
_ACCESS_KEYS = ("auth_token", "curve_secret_key_file", "curve_client_keys_file",
                "curve_server_keys_file")


class KvferryWorker:
    def __init__(self, vllm_config, cfg: ConnectorConfig, engine_id: str):
        self._cfg = cfg
        self._model = vllm_config.model_config.model
        self._block_size_logical = vllm_config.cache_config.block_size
        self._kv_cache_layout = str(vllm_config.cache_config.kv_cache_layout)
        self._model_dtype = getattr(vllm_config.model_config, "dtype", None)
        self._kv_cache_dtype = str(getattr(vllm_config.cache_config, "cache_dtype", "auto"))
        self._tp_rank = _tp_rank()
        self._tp_size = int(vllm_config.parallel_config.tensor_parallel_size)
        self._model_kv_heads = int(vllm_config.model_config.get_total_num_kv_heads())
        # This process is one rank of a split engine: its connector holds this rank's heads,
        # reads (D) what they need from whichever P ranks hold them, and serves (P) this
        # rank's side channel.
        self._conn = kvferry.ConnectorWorker(
            connector_config(cfg, engine_id, self._tp_rank, cfg.host_buffer), self._model,
            tp_rank=self._tp_rank, tp_size=self._tp_size)
        self._kv_caches: dict = {}    # vLLM's tensors: alive as long as the connector reads them
        self._failed_blocks: set[int] = set()
        self._records: dict[str, dict] = {}
        self._stats = KvferryStats()
        self._counters = self._conn.stats()

    def register_kv_caches(self, kv_caches: dict) -> None:
        self._kv_caches = kv_caches
        first = kv_caches[sorted(kv_caches)[0]]   # [blocks, heads, block_size, 2 * head_size]
        isa = attention_isa(self._model_dtype or first.dtype, first.shape[2],
                            first.shape[3] // 2, self._kv_cache_dtype)
        spec, regions = cache_of_kv_caches(kv_caches, kv_cache_layout=self._kv_cache_layout,
                                           attn_isa=isa)
        self._conn.register_kv_cache(spec, regions, self._block_size_logical,
                                     model_kv_heads=self._model_kv_heads)
        logger.info("KvferryConnector: registered %d layers, %.1f MiB, %s (attention ISA %s); "
                    "kernel block %d tokens (%d B/layer page), logical block %d; side channel "
                    "%s:%d", spec.num_layers, spec.num_regions * spec.region_bytes / 2**20,
                    spec.layout, isa, spec.block_size_kernel, spec.bytes_per_kernel_block,
                    self._block_size_logical, self._cfg.side_channel_host,
                    self._conn.side_channel_port)

    def start_load_kv(self, meta: KvferryConnectorMetadata) -> None:
        """Hands the connector what the scheduler decided this step, and starts the pulls."""
        for spec in meta.loads:
            self._conn.load(spec.request_id, json.dumps(spec.params),
                            [LogicalBlockId(b) for b in spec.local_block_ids],
                            spec.num_local_computed_tokens, spec.num_external_tokens)
        for save in meta.saves:
            self._conn.save(save.request_id, [LogicalBlockId(b) for b in save.block_ids],
                            save.token_begin, save.token_end)
        for rid, hold in meta.holds.items():
            self._conn.hold(rid, [LogicalBlockId(b) for b in hold.block_ids],
                            list(hold.generations))
        for params in meta.releases:
            self._conn.release(json.dumps(params))
        self._conn.start_load_kv()

    def wait_for_save(self) -> None:
        """After the forward pass: host-buffer staging of this step's computed chunks."""
        self._conn.after_forward()

    def get_finished(self) -> tuple[set[str], set[str]]:
        """(finished_sending, finished_recving) since the last call."""
        out = self._conn.get_finished()
        self._failed_blocks.update(b.value for b in out["invalid_block_ids"])
        for report in out["load_reports"]:
            self._record(report)
        self._count_leases()
        return set(out["finished_sending"]), set(out["finished_recving"])

    def _record(self, report: dict) -> None:
        rid, outcome = report["request_id"], report["outcome"]
        record = {"outcome": outcome, "pulled_tokens": report["tokens"],
                  "pulled_bytes": report["bytes"], "descriptors": report["descriptors"]}
        if outcome == "pulled":
            record.update(ms=round(report["pull_ms"], 3), relayout=report["staged"])
            self._stats.data["pulls"] += 1
            self._stats.data["bytes_pulled"] += report["bytes"]
            self._stats.data["descriptors"] += report["descriptors"]
            self._stats.data["pull_ms"].append(report["pull_ms"])
            logger.info("KvferryConnector: pulled %s: %d bytes, %d tokens, %d descriptors, "
                        "%.2f ms%s", rid, report["bytes"], report["tokens"],
                        report["descriptors"], report["pull_ms"],
                        ", relayout" if report["staged"] else "")
        else:
            record["error"] = report["error"]
            self._stats.data["pull_failures"] += 1
            logger.warning("KvferryConnector: load of %s failed (%s): %s; vLLM recomputes its "
                           "blocks", rid, outcome, report["error"])
        self._records[rid] = record

    def _count_leases(self) -> None:
        now = self._conn.stats()
        for key, counter in (("sends_read", "leases_released_by_notification"),
                             ("leases_expired", "leases_expired")):
            self._stats.data[key] += now[counter] - self._counters[counter]
        self._counters = now

    def take_failed_blocks(self) -> set[int]:
        out, self._failed_blocks = self._failed_blocks, set()
        return out

    def take_records(self) -> dict[str, dict]:
        out, self._records = self._records, {}
        return out

    def take_stats(self) -> KvferryStats | None:
        if self._stats.is_empty():
            return None
        out, self._stats = self._stats, KvferryStats()
        return out

    def shutdown(self) -> None:
        self._conn.shutdown()


def _tp_rank() -> int:
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return int(get_tensor_model_parallel_rank())
    except (ImportError, AssertionError, AttributeError):
        return 0
