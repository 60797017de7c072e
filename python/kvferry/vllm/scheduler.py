"""KvferryConnector's scheduler half (vLLM's EngineCore process).

A request whose kv_transfer_params say ``do_remote_decode`` is a P request: when it finishes,
its blocks are held (delay_free_blocks=True) and the response carries kvferry's
kv_transfer_params (include/kvferry/connector/kv_transfer_params.h; vLLM's field names,
remote_block_ids a FLAT list of P's logical ids). A request with ``do_remote_prefill`` is a D
request: the prompt tokens P holds beyond the local prefix hit are loaded asynchronously; vLLM
itself recomputes the last prompt token when the whole prompt arrived
(Scheduler._update_waiting_for_remote_kv). When a D request finishes, its response carries
``kvferry_load``: what the worker pulled for it, or why it did not.

Leases and generations. This process never sees P's KV memory, but it decides which blocks
are held and, through vLLM, when they are freed. It keeps a mirror kvferry.LeaseTable of P's
holds: a hold is granted here at request_finished, before P's worker grants it (the hold
reaches the worker with the next step's metadata), and ended here when the worker reports the
request in finished_sending, after the worker ended it and bumped its generations. So every
hold's interval here contains the worker's, the mirror's generations are never above the
worker's, and the generations it puts in kv_transfer_params (remote_block_generations) are
ones a D may compare with what it reads from P's worker after its data: equal means no block
it read had been given back meanwhile (docs/vllm.md, "Leases and generations").

Thread-safety: vLLM calls every method from the EngineCore's scheduler thread.
"""

import math
import secrets

import kvferry
from kvferry.vllm.config import ConnectorConfig
from kvferry.vllm.metadata import (Hold, KvferryConnectorMetadata, KvferryWorkerMetadata,
                                   LoadSpec, merge_records)

from vllm.logger import init_logger

# Under "vllm." so that vLLM's logging config (handlers, VLLM_LOGGING_LEVEL) applies.
logger = init_logger("vllm.kvferry." + __name__.rsplit(".", 1)[-1])

_D_FIELDS = ("remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host",
             "remote_port", "kvferry_lease", "remote_block_generations")


class KvferryScheduler:
    def __init__(self, vllm_config, cfg: ConnectorConfig, engine_id: str, num_blocks: int):
        self._cfg = cfg
        self._engine_id = engine_id
        self._block_size = vllm_config.cache_config.block_size
        self._tp_size = vllm_config.parallel_config.tensor_parallel_size
        self._local_hits: dict[str, int] = {}    # D: local prefix-hit tokens at match time
        self._loads: list[LoadSpec] = []         # D: to ship with the next metadata
        self._holds: dict[str, Hold] = {}        # P: to ship with the next metadata
        self._records: dict[str, dict] = {}      # D: the worker's outcome per request
        # D: requests whose load was shipped, with the TP ranks' records still to come, and
        # those of them that finished (aborted) meanwhile: vLLM keeps their blocks until every
        # rank reported the pull (Scheduler.finish_requests), and the records that come after
        # have no one to go to.
        self._loading: dict[str, int] = {}
        self._gone: dict[str, int] = {}
        self._mirror = kvferry.LeaseTable(num_blocks)  # P: the worker's leases, granted first

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        params = request.kv_transfer_params
        if not params or not params.get("do_remote_prefill"):
            return 0, False
        problem = _d_params_problem(params) or self._tp_problem(params)
        if problem:
            logger.warning("KvferryConnector: request %s has do_remote_prefill but %s; "
                           "computing its prompt locally", request.request_id, problem)
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

    def _tp_problem(self, params: dict) -> str:
        """D rank r reads P rank r's heads, so P and D must run the same TP size (a different
        one also computes different numerics: no P/D answer could equal a colocated one)."""
        p_tp = params.get("tp_size", 1)
        if p_tp != self._tp_size:
            return (f"P's tensor_parallel_size {p_tp} is not D's {self._tp_size} (heterogeneous "
                    "TP is not supported)")
        return ""

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
        first, last = local_hit // br, math.ceil(end_token / br)
        self._loading[request.request_id] = self._tp_size
        self._loads.append(LoadSpec(
            request_id=request.request_id, remote_engine_id=str(params["remote_engine_id"]),
            remote_request_id=str(params["remote_request_id"]),
            remote_host=str(params["remote_host"]), remote_port=int(params["remote_port"]),
            local_block_ids=[int(b) for b in local_ids[local_hit // bl:math.ceil(end_token / bl)]],
            remote_block_ids=remote_ids[first:last],
            first_token=local_hit, num_tokens=num_external_tokens, remote_block_size=br,
            remote_lease=str(params["kvferry_lease"]),
            remote_block_generations=[int(g) for g in
                                      params["remote_block_generations"][first:last]]))

    def build_connector_meta(self, scheduler_output) -> KvferryConnectorMetadata:
        meta = KvferryConnectorMetadata(loads=self._loads, holds=self._holds)
        self._loads, self._holds = [], {}
        return meta

    def update_connector_output(self, connector_output) -> None:
        # Every rank's worker ended these holds (vLLM reports a request once all ranks did):
        # the mirror ends them last.
        for rid in getattr(connector_output, "finished_sending", None) or ():
            self._mirror.end(rid)
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(meta, KvferryWorkerMetadata):
            for rid, record in meta.records.items():
                ranks = int(record.get("ranks", 1))
                if rid in self._gone:
                    _count_down(self._gone, rid, ranks)
                    continue
                _count_down(self._loading, rid, ranks)
                # Ranks that finish in different steps report in different outputs.
                self._records[rid] = merge_records(self._records.get(rid), record)

    def request_finished(self, request, block_ids) -> tuple[bool, dict | None]:
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        if not params:
            return False, None
        record = self._records.pop(request.request_id, None)
        if not params.get("do_remote_decode"):
            if request.request_id in self._loading:
                self._gone[request.request_id] = self._loading.pop(request.request_id)
            return False, ({"kvferry_load": record} if record is not None else None)
        ids = _flat(block_ids)
        if request.status not in (RequestStatus.FINISHED_LENGTH_CAPPED,
                                  RequestStatus.FINISHED_STOPPED) or not ids:
            return False, None
        try:
            generations = self._mirror.grant(request.request_id,
                                             [kvferry.LogicalBlockId(b) for b in ids])
        except kvferry.KvferryError as e:   # a request id held twice, or a block outside
            logger.error("KvferryConnector: cannot hold %s's blocks for a D: %s",
                         request.request_id, e)
            return False, None
        # A lease id per hold, so a notification for another hold of the same request id
        # cannot end this one.
        lease = secrets.token_hex(8)
        self._holds[request.request_id] = Hold(self._cfg.lease_timeout_s, lease, tuple(ids))
        return True, {
            "do_remote_prefill": True, "do_remote_decode": False,
            "remote_engine_id": self._engine_id, "remote_request_id": request.request_id,
            "remote_block_ids": ids, "remote_host": self._cfg.side_channel_host,
            "remote_port": self._cfg.side_channel_port, "tp_size": self._tp_size,
            "remote_num_tokens": int(request.num_computed_tokens),
            # kvferry's addition: P's block size, so a D of another block size knows which of
            # P's blocks hold which tokens.
            "remote_block_size": self._block_size,
            # and P's lease on those blocks, which D's notification names, and their
            # generations, which D compares with P's after its read.
            "kvferry_lease": lease,
            "remote_block_generations": generations,
        }


def _count_down(pending: dict[str, int], rid: str, n: int) -> None:
    left = pending.get(rid, 0) - n
    if left > 0:
        pending[rid] = left
    else:
        pending.pop(rid, None)


def _d_params_problem(params: dict) -> str:
    """What makes a D request's kv_transfer_params unusable ("" when nothing does)."""
    missing = [f for f in _D_FIELDS if params.get(f) is None]
    if missing:
        return "no " + ", ".join(missing)
    try:
        n_ids = len(_flat(params["remote_block_ids"]))
        n_gens = len([int(g) for g in params["remote_block_generations"]])
    except (TypeError, ValueError) as e:
        return f"malformed remote_block_ids or remote_block_generations ({e})"
    if n_ids != n_gens:
        return f"{n_gens} remote_block_generations for {n_ids} remote_block_ids"
    return ""


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
