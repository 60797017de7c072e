"""KvferryConnector's scheduler half (vLLM's EngineCore process).

A request whose kv_transfer_params say ``do_remote_decode`` is a P request: when it finishes,
its blocks are held (delay_free_blocks=True) and the response carries kvferry's
kv_transfer_params (include/kvferry/connector/kv_transfer_params.h; vLLM's field names,
remote_block_ids a FLAT list of P's logical ids). A request with ``do_remote_prefill`` is a D
request: the prompt tokens P holds beyond the local prefix hit are loaded asynchronously; vLLM
itself recomputes the last prompt token when the whole prompt arrived
(Scheduler._update_waiting_for_remote_kv). When a D request finishes, its response carries
``kvferry_load``: what the worker pulled for it, or why it did not.

Thread-safety: vLLM calls every method from the EngineCore's scheduler thread.
"""

import math
import secrets

from kvferry.vllm.config import ConnectorConfig
from kvferry.vllm.metadata import Hold, KvferryConnectorMetadata, KvferryWorkerMetadata, LoadSpec

from vllm.logger import init_logger

# Under "vllm." so that vLLM's logging config (handlers, VLLM_LOGGING_LEVEL) applies.
logger = init_logger("vllm.kvferry." + __name__.rsplit(".", 1)[-1])

_D_FIELDS = ("remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host",
             "remote_port", "kvferry_lease")


class KvferryScheduler:
    def __init__(self, vllm_config, cfg: ConnectorConfig, engine_id: str):
        self._cfg = cfg
        self._engine_id = engine_id
        self._block_size = vllm_config.cache_config.block_size
        self._tp_size = vllm_config.parallel_config.tensor_parallel_size
        self._local_hits: dict[str, int] = {}    # D: local prefix-hit tokens at match time
        self._loads: list[LoadSpec] = []         # D: to ship with the next metadata
        self._holds: dict[str, Hold] = {}        # P: to ship with the next metadata
        self._records: dict[str, dict] = {}      # D: the worker's outcome per request

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        params = request.kv_transfer_params
        if not params or not params.get("do_remote_prefill"):
            return 0, False
        missing = [f for f in _D_FIELDS if params.get(f) is None]
        if missing:
            logger.warning("KvferryConnector: request %s has do_remote_prefill but no %s; "
                           "computing its prompt locally", request.request_id,
                           ", ".join(missing))
            params["do_remote_prefill"] = False
            return 0, False
        num_prompt = request.num_prompt_tokens
        remote_tokens = params.get("remote_num_tokens")
        if remote_tokens is None or int(remote_tokens) < 0:
            remote_tokens = num_prompt
        remote_block_size = int(params.get("remote_block_size") or self._block_size)
        held = min(int(remote_tokens), num_prompt,
                   len(_flat(params["remote_block_ids"])) * remote_block_size)
        count = held - num_computed_tokens
        if count <= 0:
            return 0, False
        self._local_hits[request.request_id] = num_computed_tokens
        return count, True

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if not params or not params.get("do_remote_prefill"):
            return
        params["do_remote_prefill"] = False   # one load per request
        local_hit = self._local_hits.pop(request.request_id, 0)
        if num_external_tokens <= 0:
            return
        (local_ids, *_rest) = blocks.get_block_ids()
        # Tokens [local_hit, end_token) come from P; each side's blocks cover them in its own
        # block size (different sizes: the worker relayouts, relayout.py).
        end_token = local_hit + num_external_tokens
        bl = self._block_size
        br = int(params.get("remote_block_size") or bl)
        remote_ids = _flat(params["remote_block_ids"])
        self._loads.append(LoadSpec(
            request_id=request.request_id, remote_engine_id=str(params["remote_engine_id"]),
            remote_request_id=str(params["remote_request_id"]),
            remote_host=str(params["remote_host"]), remote_port=int(params["remote_port"]),
            local_block_ids=[int(b) for b in local_ids[local_hit // bl:math.ceil(end_token / bl)]],
            remote_block_ids=remote_ids[local_hit // br:math.ceil(end_token / br)],
            first_token=local_hit, num_tokens=num_external_tokens, remote_block_size=br,
            remote_lease=str(params["kvferry_lease"])))

    def build_connector_meta(self, scheduler_output) -> KvferryConnectorMetadata:
        meta = KvferryConnectorMetadata(loads=self._loads, holds=self._holds)
        self._loads, self._holds = [], {}
        return meta

    def update_connector_output(self, connector_output) -> None:
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(meta, KvferryWorkerMetadata):
            self._records.update(meta.records)

    def request_finished(self, request, block_ids) -> tuple[bool, dict | None]:
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        if not params:
            return False, None
        record = self._records.pop(request.request_id, None)
        if not params.get("do_remote_decode"):
            return False, ({"kvferry_load": record} if record is not None else None)
        ids = _flat(block_ids)
        if request.status not in (RequestStatus.FINISHED_LENGTH_CAPPED,
                                  RequestStatus.FINISHED_STOPPED) or not ids:
            return False, None
        # A lease id per hold, so a D's question about it cannot be answered by another hold
        # of the same request id.
        lease = secrets.token_hex(8)
        self._holds[request.request_id] = Hold(self._cfg.lease_timeout_s, lease)
        return True, {
            "do_remote_prefill": True, "do_remote_decode": False,
            "remote_engine_id": self._engine_id, "remote_request_id": request.request_id,
            "remote_block_ids": ids, "remote_host": self._cfg.side_channel_host,
            "remote_port": self._cfg.side_channel_port, "tp_size": self._tp_size,
            "remote_num_tokens": int(request.num_computed_tokens),
            # kvferry's addition: P's block size, so a D of another block size knows which of
            # P's blocks hold which tokens.
            "remote_block_size": self._block_size,
            # and P's lease on those blocks, which D confirms after its read.
            "kvferry_lease": lease,
        }


def _flat(block_ids) -> list[int]:
    """vLLM hands block ids flat (one group) or as one list per KV-cache group; kvferry's
    params are flat. More than one group (hybrid models) is not supported."""
    ids = list(block_ids or [])
    if ids and isinstance(ids[0], (list, tuple)):
        if len(ids) != 1:
            raise ValueError(f"KvferryConnector: {len(ids)} KV-cache groups; only one is "
                             "supported")
        ids = list(ids[0])
    return [int(b) for b in ids]
