"""KvferryConnector's worker half (vLLM's Worker process, one per TP rank).

P: registers vLLM's KV storage with a kvferry.Agent, serves the agent's metadata and the KV
layout on the side channel, and holds each finished request's blocks until D's notification
names it (then reports it in finished_sending, so vLLM frees them) or its lease runs out
(leases.py). D: for each load the scheduler ships, handshakes with P once per peer (refusing an
incompatible KV), plans the read (kvferry.BlockGeometry, runs merged), posts ONE prepared READ
per request with a deadline. The READ carries a notification naming the pull and P's request,
delivered once every byte is in D. As it posts the READ, D asks P's side channel (on a helper
thread) to pin the hold under the request's lease; once the READ is done and P's answer proves
the blocks were held all through it, D reports the request in finished_recving. Any failure
(handshake, transfer, deadline, a lease that expired, was taken or cannot be confirmed) reports
the request's blocks through get_block_ids_with_load_errors, so vLLM recomputes exactly those
tokens.

Thread-safety: vLLM calls every method from the model runner's thread; the side channel serves
from its own thread bytes fixed at registration and lease states from the (locked) LeaseTable;
D's lease questions run on the `_asker` threads and touch nothing but their arguments.
"""

import secrets
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import kvferry
from kvferry.vllm import leases
from kvferry.vllm.config import ConnectorConfig
from kvferry.vllm.handshake import (HandshakeError, PeerInfo, SideChannelServer,
                                    check_compatible, fetch_handshake, query_lease)
from kvferry.vllm.layout import (KvLayout, layout_of_kv_caches, plan_read, plan_staged_read,
                                 same_geometry)
from kvferry.vllm.metadata import KvferryConnectorMetadata, KvferryStats, LoadSpec

from vllm.logger import init_logger

# Under "vllm." so that vLLM's logging config (handlers, VLLM_LOGGING_LEVEL) applies.
logger = init_logger("vllm.kvferry." + __name__.rsplit(".", 1)[-1])

_DONE_PREFIX = b"kvferry-vllm/done/"
_LEASE_RETRY_S = 0.02     # D: between questions while P does not know the hold yet
_LEASE_WAIT_S = 0.005     # D: how long one step waits for P's answer, once the READ is done
_PIN_MARGIN_S = 5.0       # D: P pins a hold this much longer than D's load deadline


def done_message(reader: str, remote_request_id: str) -> bytes:
    """The READ's notification: which pull (reader, hex) read which of P's requests."""
    return _DONE_PREFIX + reader.encode() + b"/" + remote_request_id.encode()


def parse_done_message(message: bytes) -> tuple[str, str] | None:
    """(reader, remote request id) of a done_message; None for any other notification."""
    if not message.startswith(_DONE_PREFIX):
        return None
    reader, sep, rid = message[len(_DONE_PREFIX):].partition(b"/")
    if not sep:
        return None
    return reader.decode(errors="replace"), rid.decode(errors="replace")


@dataclass
class _Pull:
    spec: LoadSpec
    transfer: kvferry.Transfer
    peer_key: tuple[str, int]
    started: float
    deadline: float
    bytes: int
    descriptors: int
    # Set when P's block size differs from D's: P's pages land here, relayout_into rewrites them.
    staging: object = None
    staging_region: object = None
    num_staged_blocks: int = 0
    layout: KvLayout | None = None   # P's
    # D's question to P about the lease (leases.py), asked as the READ is posted.
    reader: str = ""
    read_done: bool = False
    confirm: Future | None = None
    ask_again_at: float = 0.0


class KvferryWorker:
    def __init__(self, vllm_config, cfg: ConnectorConfig, engine_id: str):
        self._cfg = cfg
        self._engine_id = engine_id
        self._model = vllm_config.model_config.model
        self._block_size_logical = vllm_config.cache_config.block_size
        self._kv_cache_layout = str(vllm_config.cache_config.kv_cache_layout)
        self._tp_rank = _tp_rank()
        self._agent = kvferry.Agent(f"kvferry-vllm-{engine_id}-tp{self._tp_rank}", cfg.backend,
                                    ucx_transport=cfg.ucx_transport)
        self._layout: KvLayout | None = None
        self._kv_caches: dict = {}
        self._region: kvferry.Region | None = None
        self._server: SideChannelServer | None = None
        self._peers: dict[tuple[str, int], tuple[kvferry.Peer, PeerInfo]] = {}
        self._pulls: dict[str, _Pull] = {}
        self._finished_recving: set[str] = set()
        self._finished_sending: set[str] = set()
        self._failed_blocks: set[int] = set()
        self._records: dict[str, dict] = {}
        self._leases = leases.LeaseTable()          # P
        self._asker = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kvferry-lease")
        self._stats = KvferryStats()

    # ---- registration (both roles) --------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict) -> None:
        self._kv_caches = kv_caches
        self._layout, base = layout_of_kv_caches(
            kv_caches, model=self._model, kv_cache_layout=self._kv_cache_layout,
            block_size_logical=self._block_size_logical)
        t0 = time.perf_counter()
        self._region = self._agent.register_memory(ptr=base, size=self._layout.region_size)
        info = PeerInfo(self._engine_id, self._tp_rank, self._region.id,
                        self._agent.get_local_metadata(), self._layout)
        port = self._cfg.side_channel_port + self._tp_rank
        self._server = SideChannelServer(self._cfg.side_channel_host, port, info,
                                         self._leases.pin)
        lay = self._layout
        logger.info("KvferryConnector: registered %d layers, %.1f MiB in %.1f ms; kernel block "
                    "%d tokens (%d B/layer page), logical block %d; side channel %s:%d",
                    len(lay.layer_names), lay.region_size / 2**20,
                    (time.perf_counter() - t0) * 1e3, lay.block_size_kernel,
                    lay.bytes_per_kernel_block, lay.block_size_logical,
                    self._cfg.side_channel_host, port)

    # ---- D: pulls -------------------------------------------------------------------------

    def start_load_kv(self, meta: KvferryConnectorMetadata) -> None:
        for spec in meta.loads:
            if spec.request_id in self._pulls:
                continue
            try:
                self._start_pull(spec)
            except HandshakeError as e:
                self._fail(spec, "handshake_failed", str(e))
            except kvferry.KvferryError as e:
                self._forget_peer(self._peer_key(spec))
                self._fail(spec, "transfer_failed", f"{type(e).__name__}: {e}")
            except ValueError as e:  # a plan outside the regions: bad params from the proxy
                self._fail(spec, "transfer_failed", str(e))
        for rid, hold in meta.holds.items():
            if self._leases.add(rid, hold.lease, hold.lease_s):
                self._note_read(rid)

    def _peer_key(self, spec: LoadSpec) -> tuple[str, int]:
        return (spec.remote_host, int(spec.remote_port) + self._tp_rank)

    def _start_pull(self, spec: LoadSpec) -> None:
        key = self._peer_key(spec)
        peer, info = self._peer(key)
        staging = staging_region = None
        if same_geometry(self._layout, info.layout):
            plan = plan_read(self._layout, info.layout, spec.local_block_ids,
                             spec.remote_block_ids)
            local_region = self._region
        else:
            import torch
            plan = plan_staged_read(info.layout, spec.remote_block_ids)
            staging = torch.empty(plan.total_bytes, dtype=torch.uint8)
            staging_region = local_region = self._agent.register_memory(staging)
        reader = secrets.token_hex(8)
        try:
            xfer = self._agent.prepare_transfer(
                kvferry.XferOp.READ, peer,
                local=[(local_region, off, n) for off, n in plan.local],
                remote=[(info.region_id, off, n) for off, n in plan.remote],
                notification=done_message(reader, spec.remote_request_id),
                timeout_ms=self._cfg.load_timeout_ms)
            xfer.post()
        except BaseException:
            if staging_region is not None:
                self._agent.deregister_memory(staging_region)
            raise
        now = time.monotonic()
        pull = _Pull(spec, xfer, key, now, now + self._cfg.load_timeout_ms / 1000,
                     plan.total_bytes, xfer.info.num_descriptors_merged, staging,
                     staging_region, len(spec.remote_block_ids), info.layout, reader=reader)
        self._pulls[spec.request_id] = pull
        self._ask_lease(pull)

    def _ask_lease(self, pull: _Pull) -> None:
        """Asks P, on a helper thread, to pin the hold this pull reads (leases.py)."""
        spec = pull.spec
        pin_ms = self._cfg.load_timeout_ms + _PIN_MARGIN_S * 1e3
        pull.confirm = self._asker.submit(query_lease, pull.peer_key[0], pull.peer_key[1],
                                          spec.remote_request_id, spec.remote_lease,
                                          pull.reader, pin_ms, self._cfg.handshake_timeout_ms)

    def _peer(self, key: tuple[str, int]) -> tuple[kvferry.Peer, PeerInfo]:
        if key not in self._peers:
            info = fetch_handshake(key[0], key[1], self._cfg.handshake_timeout_ms)
            try:
                check_compatible(self._layout, info)
            except HandshakeError as e:
                logger.error("KvferryConnector: refusing P at %s:%d: %s", key[0], key[1], e)
                raise
            try:
                peer = self._agent.load_remote_metadata(info.agent_metadata)
            except kvferry.KvferryError as e:
                raise HandshakeError(f"P at {key[0]}:{key[1]}: agent metadata refused: "
                                     f"{type(e).__name__}: {e}") from None
            self._peers[key] = (peer, info)
            logger.info("KvferryConnector: handshake with P engine %s at %s:%d", info.engine_id,
                        key[0], key[1])
        return self._peers[key]

    def _forget_peer(self, key: tuple[str, int]) -> None:
        entry = self._peers.pop(key, None)
        if entry is not None:
            try:
                self._agent.remove_peer(entry[0])
            except kvferry.KvferryError:
                pass

    def _poll_pulls(self) -> None:
        for rid in list(self._pulls):
            pull = self._pulls[rid]
            if pull.read_done:
                self._confirm_lease(rid, pull)
                continue
            try:
                state = pull.transfer.poll()
            except kvferry.DeadlineExceededError as e:
                self._end_pull(rid, "deadline_exceeded", f"{e}")
                continue
            except kvferry.KvferryError as e:
                self._end_pull(rid, "transfer_failed", f"{type(e).__name__}: {e}")
                continue
            if state == kvferry.XferState.DONE:
                pull.read_done = True
                self._confirm_lease(rid, pull)
            elif time.monotonic() > pull.deadline + 1.0:
                self._end_pull(rid, "deadline_exceeded",
                               f"no completion {self._cfg.load_timeout_ms} ms after post")

    def _confirm_lease(self, rid: str, pull: _Pull) -> None:
        """The READ is done: ends the pull by P's answer about its lease (leases.py), asking
        again while P does not know the hold yet."""
        now = time.monotonic()
        if pull.confirm is None:
            if now < pull.ask_again_at:
                return
            self._ask_lease(pull)
        if not pull.confirm.done():
            wait([pull.confirm], timeout=_LEASE_WAIT_S)
            if not pull.confirm.done():
                return
        try:
            state = pull.confirm.result()
        except HandshakeError as e:
            self._end_pull(rid, "lease_unconfirmed", f"P could not confirm the lease: {e}")
            return
        pull.confirm = None
        if state in (leases.HELD, leases.READ):
            self._end_pull(rid, "pulled", "")
        elif state == leases.EXPIRED:
            self._end_pull(rid, "lease_expired", "P's lease on the blocks ran out before the "
                           "read was confirmed; they may have been reused")
        elif state == leases.TAKEN:
            self._end_pull(rid, "lease_taken", "another D's read ended P's hold of the blocks; "
                           "they may have been reused")
        elif now > pull.deadline:
            self._end_pull(rid, "lease_unconfirmed", "P does not know the lease "
                           f"{pull.spec.remote_lease} of {pull.spec.remote_request_id}")
        else:
            pull.ask_again_at = now + _LEASE_RETRY_S

    def _end_pull(self, rid: str, outcome: str, error: str) -> None:
        pull = self._pulls.pop(rid)
        try:
            pull.transfer.release()
        except kvferry.KvferryError:
            pass
        relayout = pull.staging is not None
        if relayout and outcome == "pulled":
            try:
                self._relayout(pull)
            except (ValueError, RuntimeError) as e:
                outcome, error = "relayout_failed", str(e)
        if relayout:
            self._agent.deregister_memory(pull.staging_region)
        ms = (time.monotonic() - pull.started) * 1e3
        if outcome == "pulled":
            self._stats.data["pulls"] += 1
            self._stats.data["bytes_pulled"] += pull.bytes
            self._stats.data["descriptors"] += pull.descriptors
            self._stats.data["pull_ms"].append(ms)
            self._finished_recving.add(rid)
            self._records[rid] = {"outcome": outcome, "bytes": pull.bytes,
                                  "descriptors": pull.descriptors, "ms": round(ms, 3),
                                  "relayout": relayout}
            logger.info("KvferryConnector: pulled %s: %d bytes, %d blocks, %d descriptors, "
                        "%.2f ms%s", rid, pull.bytes, len(pull.spec.local_block_ids),
                        pull.descriptors, ms,
                        f", relayout from {pull.layout.block_size_logical}-token blocks"
                        if relayout else "")
            return
        if outcome not in ("lease_expired", "lease_taken"):   # nothing against P itself
            self._forget_peer(pull.peer_key)
        self._fail(pull.spec, outcome, error)

    def _relayout(self, pull: _Pull) -> None:
        from kvferry.vllm.relayout import relayout_into
        spec = pull.spec
        br = pull.layout.block_size_logical
        relayout_into(self._kv_caches, self._layout, pull.layout, pull.staging,
                      pull.num_staged_blocks, (spec.first_token // br) * br,
                      spec.local_block_ids, spec.first_token, spec.num_tokens)

    def _fail(self, spec: LoadSpec, outcome: str, error: str) -> None:
        logger.warning("KvferryConnector: load of %s from %s:%d failed (%s): %s; vLLM "
                       "recomputes its %d blocks", spec.request_id, spec.remote_host,
                       spec.remote_port, outcome, error, len(spec.local_block_ids))
        self._stats.data["pull_failures"] += 1
        self._finished_recving.add(spec.request_id)
        self._failed_blocks.update(int(b) for b in spec.local_block_ids)
        self._records[spec.request_id] = {"outcome": outcome, "bytes": 0, "descriptors": 0,
                                          "error": error}

    # ---- P: holds -------------------------------------------------------------------------

    def _poll_holds(self) -> None:
        for note in self._agent.get_notifications():
            done = parse_done_message(note.message)
            if done is not None and self._leases.read(done[1], done[0]):
                self._note_read(done[1])
        for rid in self._leases.expire():
            logger.warning("KvferryConnector: lease of %s expired (%.0f s) without D's "
                           "notification; freeing its blocks", rid, self._cfg.lease_timeout_s)
            self._stats.data["leases_expired"] += 1
            self._finished_sending.add(rid)

    def _note_read(self, rid: str) -> None:
        self._stats.data["sends_read"] += 1
        self._finished_sending.add(rid)

    # ---- per step -------------------------------------------------------------------------

    def get_finished(self) -> tuple[set[str], set[str]]:
        """(finished_sending, finished_recving) since the last call."""
        self._poll_pulls()
        self._poll_holds()
        sending, recving = self._finished_sending, self._finished_recving
        self._finished_sending, self._finished_recving = set(), set()
        return sending, recving

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
        self._asker.shutdown(wait=False, cancel_futures=True)
        if self._server is not None:
            self._server.close()
            self._server = None
        for rid in list(self._pulls):
            try:
                self._pulls.pop(rid).transfer.release()
            except kvferry.KvferryError:
                pass
        self._agent.close()


def _tp_rank() -> int:
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return int(get_tensor_model_parallel_rank())
    except (ImportError, AssertionError, AttributeError):
        return 0
