"""KvferryConnector's scheduler half (vLLM's EngineCore process).

A request whose kv_transfer_params say ``do_remote_decode`` is a P request: when it finishes,
its blocks are held (delay_free_blocks=True) and the response carries kvferry's
kv_transfer_params (include/kvferry/connector/kv_transfer_params.h; vLLM's field names,
remote_block_ids a FLAT list of P's logical ids). A request with ``do_remote_prefill`` is a D
request: the prompt tokens P holds beyond the local prefix hit are loaded asynchronously; vLLM
itself recomputes the last prompt token when the whole prompt arrived
(Scheduler._update_waiting_for_remote_kv); a D request whose prompt D's prefix cache already
holds gives P's offer back (a release). When a D request finishes, its response carries
``kvferry_load``: what the worker pulled for it, or why it did not. With ``host_buffer``, each
remote-decode request's chunk computed in a step is shipped as a save, which the worker stages
after that step's forward pass (so before the request can finish and its params leave).

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

import kvferry
from kvferry import HeadSharding, InvalidArgumentError
from kvferry.vllm.config import ConnectorConfig
from kvferry.vllm.metadata import (Hold, KvferryConnectorMetadata, KvferryWorkerMetadata,
                                   LoadSpec, Save, merge_records)

from vllm.logger import init_logger

# Under "vllm." so that vLLM's logging config (handlers, VLLM_LOGGING_LEVEL) applies.
logger = init_logger("vllm.kvferry." + __name__.rsplit(".", 1)[-1])

_D_FIELDS = ("remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host",
             "remote_port", "remote_block_generations")


class KvferryScheduler:
    def __init__(self, vllm_config, cfg: ConnectorConfig, engine_id: str, num_blocks: int):
        self._cfg = cfg
        self._engine_id = engine_id
        self._block_size = vllm_config.cache_config.block_size
        self._tp_size = vllm_config.parallel_config.tensor_parallel_size
        self._kv_heads = int(vllm_config.model_config.get_total_num_kv_heads())
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
        self._releases: list[dict] = []          # D: offers to give back, next metadata
        self._no_load: dict[str, dict] = {}      # D: offers whose tokens D's cache already holds
        # P with the host buffer: the remote-decode requests being computed, their blocks so far,
        # and the chunks to stage with the next metadata.
        self._staging: dict[str, list[int]] = {}
        self._saves: list[Save] = []

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
            self._no_load[request.request_id] = params
            return 0, False
        self._local_hits[request.request_id] = num_computed_tokens
        return count, True

    def _tp_problem(self, params: dict) -> str:
        """P may run another TP size than D (each D rank reads its heads from the P ranks that
        hold them), as long as that size shards the model's KV heads: one divides the other."""
        p_tp = params.get("tp_size", 1)
        if not isinstance(p_tp, int) or isinstance(p_tp, bool) or p_tp < 1:
            return f"tp_size {p_tp!r} is not a positive integer"
        try:
            HeadSharding(self._kv_heads, p_tp)   # the C++ rule (kv/head_sharding.h)
        except InvalidArgumentError as e:
            return f"P's tensor_parallel_size: {e.message}"
        return ""

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if params and params.get("do_remote_decode") and self._cfg.host_buffer:
            self._staging[request.request_id] = []   # its blocks come with the schedule
        if not params or not params.get("do_remote_prefill"):
            return
        params["do_remote_prefill"] = False   # one load per request
        local_hit = self._local_hits.pop(request.request_id, 0)
        no_load = self._no_load.pop(request.request_id, None)
        if num_external_tokens <= 0:
            if no_load is not None and _flat(no_load["remote_block_ids"]):
                self._releases.append(_offer(no_load))
            return
        (local_ids, *_rest) = blocks.get_block_ids()
        self._loading[request.request_id] = self._tp_size
        # Tokens [local_hit, local_hit + num_external_tokens) come from P; the connector maps
        # them to each side's blocks in its own block size.
        self._loads.append(LoadSpec(
            request_id=request.request_id, params=_offer(params),
            local_block_ids=[int(b) for b in local_ids],
            num_local_computed_tokens=local_hit, num_external_tokens=num_external_tokens))

    def build_connector_meta(self, scheduler_output) -> KvferryConnectorMetadata:
        if self._staging:
            self._queue_saves(scheduler_output)
        meta = KvferryConnectorMetadata(loads=self._loads, holds=self._holds, saves=self._saves,
                                        releases=self._releases)
        self._loads, self._holds, self._saves, self._releases = [], {}, [], []
        return meta

    def _queue_saves(self, scheduler_output) -> None:
        """Host buffer: each remote-decode request's chunk computed in this step, to stage
        after its forward pass; from token 0 when it was (re)admitted (tokens P's prefix cache
        gave it were computed by a request that may never have been staged)."""
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id in self._staging:
                self._staging[new.req_id] = _flat(new.block_ids)
                self._queue_save(new.req_id, 0, new.num_computed_tokens + scheduled[new.req_id])
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            if rid not in self._staging:
                continue
            new_ids, computed = cached.new_block_ids[i], cached.num_computed_tokens[i]
            if rid in cached.resumed_req_ids:   # preempted and back: its blocks are all new
                self._staging[rid] = _flat(new_ids)
                self._queue_save(rid, 0, computed + scheduled[rid])
                continue
            if new_ids is not None:
                self._staging[rid].extend(_flat(new_ids))
            self._queue_save(rid, computed, computed + scheduled[rid])

    def _queue_save(self, rid: str, begin: int, end: int) -> None:
        if end > begin:
            self._saves.append(Save(rid, tuple(self._staging[rid]), begin, end))

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
        # A request that finished before it was scheduled leaves nothing behind here.
        self._no_load.pop(request.request_id, None)
        self._local_hits.pop(request.request_id, None)
        if not params:
            return False, None
        record = self._records.pop(request.request_id, None)
        if not params.get("do_remote_decode"):
            if request.request_id in self._loading:
                self._gone[request.request_id] = self._loading.pop(request.request_id)
            return False, ({"kvferry_load": record} if record is not None else None)
        self._staging.pop(request.request_id, None)
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
        self._holds[request.request_id] = Hold(tuple(ids), tuple(generations))
        return True, {
            "do_remote_prefill": True, "do_remote_decode": False,
            "remote_engine_id": self._engine_id, "remote_request_id": request.request_id,
            "remote_block_ids": ids, "remote_host": self._cfg.side_channel_host,
            "remote_port": self._cfg.side_channel_port, "tp_size": self._tp_size,
            "remote_num_tokens": int(request.num_computed_tokens),
            # kvferry's additions: P's block size, so that D's scheduler knows how many tokens
            # P's blocks hold, and their generations, which D compares with P's after its read.
            "remote_block_size": self._block_size,
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


# What D's connector needs of P's offer (include/kvferry/connector/kv_transfer_params.h).
_OFFER_FIELDS = _D_FIELDS + ("tp_size", "remote_num_tokens")


def _offer(params: dict) -> dict:
    """P's kv_transfer_params as kvferry's connector parses them (block ids flat)."""
    out = {k: params[k] for k in _OFFER_FIELDS if params.get(k) is not None}
    out["remote_block_ids"] = _flat(params["remote_block_ids"])
    out["do_remote_prefill"] = True
    return out
