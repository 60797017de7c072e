"""KvferryConnector's worker half (vLLM's Worker process, one per TP rank).

P: registers vLLM's KV storage and its lease generations (a kvferry.LeaseTable, kvferry's C++
lease table) with a kvferry.Agent, serves the agent's metadata, the regions and the KV layout
on the side channel, and holds each finished request's blocks until D's notification names
its lease (then bumps their generations and reports the request in finished_sending, so vLLM
frees them) or the lease runs out (the same). D: for each load the scheduler ships,
handshakes with P once per peer (refusing an incompatible KV), plans the read
(kvferry.BlockGeometry, runs merged), posts ONE prepared READ of the data per request with a
deadline, then, once every byte is in, a READ of the same blocks' generations in P's table,
carrying the notification that ends P's hold. The pull lands only if every generation equals
the one P's scheduler put in kv_transfer_params: then no block was given back (and perhaps
reused) before the data read completed. Any failure (handshake, transfer, deadline, a changed
generation) reports the request's blocks through get_block_ids_with_load_errors, so vLLM
recomputes exactly those tokens.

Thread-safety: vLLM calls every method from the model runner's thread; the side channel serves
from its own threads bytes fixed at registration; the agent's transport reads the generation
array at any time (single aligned 64-bit stores, lease_table.h).
"""

import struct
import time
from dataclasses import dataclass

import kvferry
from kvferry import LogicalBlockId
from kvferry.vllm.config import ConnectorConfig
from kvferry.vllm.handshake import (HandshakeError, PeerInfo, SideChannelServer,
                                    check_compatible, fetch_handshake)
from kvferry.vllm.layout import (KvLayout, layout_of_kv_caches, plan_read, plan_staged_read,
                                 same_geometry)
from kvferry.vllm.metadata import KvferryConnectorMetadata, KvferryStats, LoadSpec

from vllm.logger import init_logger

# Under "vllm." so that vLLM's logging config (handlers, VLLM_LOGGING_LEVEL) applies.
logger = init_logger("vllm.kvferry." + __name__.rsplit(".", 1)[-1])

_DONE_PREFIX = b"kvferry-vllm/done/"
_GENERATIONS_WAIT_MS = 20  # D: how long a step waits for the generation READ it just posted
_REMEMBER_S = 600.0        # P: how long an ended hold or an early notification is remembered


def done_message(lease: str, remote_request_id: str) -> bytes:
    """The generation READ's notification: the hold (lease id, hex) of which of P's requests
    this D has read."""
    return _DONE_PREFIX + lease.encode() + b"/" + remote_request_id.encode()


def parse_done_message(message: bytes) -> tuple[str, str] | None:
    """(lease, remote request id) of a done_message; None for any other notification."""
    if not message.startswith(_DONE_PREFIX):
        return None
    lease, sep, rid = message[len(_DONE_PREFIX):].partition(b"/")
    if not sep:
        return None
    return lease.decode(errors="replace"), rid.decode(errors="replace")


@dataclass
class _Pull:
    spec: LoadSpec
    transfer: kvferry.Transfer     # the data READ
    peer_key: tuple[str, int]
    peer: kvferry.Peer
    info: PeerInfo
    started: float
    deadline: float
    bytes: int
    descriptors: int
    # Set when P's block size differs from D's: P's pages land here, relayout_into rewrites them.
    staging: object = None
    staging_region: object = None
    num_staged_blocks: int = 0
    # The READ of P's generations of spec.remote_block_ids, posted once the data is in.
    generations: bytearray | None = None
    generations_region: object = None
    generations_read: kvferry.Transfer | None = None


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
        # P: the lease table (made at registration, as big as the cache), the lease id of each
        # live hold, notifications that came before their hold, holds that ended.
        self._leases: kvferry.LeaseTable | None = None
        self._hold_leases: dict[str, str] = {}
        self._early: dict[str, tuple[str, float]] = {}   # rid -> (lease, when)
        self._ended: dict[str, tuple[str, float]] = {}   # rid -> (lease, when)
        self._stats = KvferryStats()

    # ---- registration (both roles) --------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict) -> None:
        self._kv_caches = kv_caches
        self._layout, base = layout_of_kv_caches(
            kv_caches, model=self._model, kv_cache_layout=self._kv_cache_layout,
            block_size_logical=self._block_size_logical)
        lay = self._layout
        t0 = time.perf_counter()
        self._region = self._agent.register_memory(ptr=base, size=lay.region_size)
        self._leases = kvferry.LeaseTable(lay.num_blocks_logical)
        generations = self._agent.register_memory(ptr=self._leases.generations_address,
                                                  size=self._leases.generations_nbytes)
        info = PeerInfo(self._engine_id, self._tp_rank, self._region.id, generations.id,
                        self._agent.get_local_metadata(), lay)
        port = self._cfg.side_channel_port + self._tp_rank
        self._server = SideChannelServer(self._cfg.side_channel_host, port, info)
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
        self._grant_holds(meta.holds)

    def _peer_key(self, spec: LoadSpec) -> tuple[str, int]:
        return (spec.remote_host, int(spec.remote_port) + self._tp_rank)

    def _start_pull(self, spec: LoadSpec) -> None:
        key = self._peer_key(spec)
        peer, info = self._peer(key)
        _check_generations_spec(spec, info)
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
        try:
            xfer = self._agent.prepare_transfer(
                kvferry.XferOp.READ, peer,
                local=[(local_region, off, n) for off, n in plan.local],
                remote=[(info.region_id, off, n) for off, n in plan.remote],
                timeout_ms=self._cfg.load_timeout_ms)
            xfer.post()
        except BaseException:
            if staging_region is not None:
                self._agent.deregister_memory(staging_region)
            raise
        now = time.monotonic()
        self._pulls[spec.request_id] = _Pull(
            spec, xfer, key, peer, info, now, now + self._cfg.load_timeout_ms / 1000,
            plan.total_bytes, xfer.info.num_descriptors_merged, staging, staging_region,
            len(spec.remote_block_ids))

    def _post_generations_read(self, pull: _Pull) -> None:
        """The data is in: READ P's generations of the blocks read, with the notification
        that ends P's hold (after this READ's last byte)."""
        spec = pull.spec
        pull.generations = bytearray(8 * len(spec.remote_block_ids))
        pull.generations_region = self._agent.register_memory(pull.generations)
        left_ms = max(1, int((pull.deadline - time.monotonic()) * 1000))
        pull.generations_read = self._agent.prepare_transfer(
            kvferry.XferOp.READ, pull.peer,
            local=[(pull.generations_region, 8 * i, 8)
                   for i in range(len(spec.remote_block_ids))],
            remote=[(pull.info.generations_region_id, 8 * b, 8) for b in spec.remote_block_ids],
            notification=done_message(spec.remote_lease, spec.remote_request_id),
            timeout_ms=left_ms)
        pull.generations_read.post()

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
            try:
                outcome, error = self._advance(self._pulls[rid])
            except kvferry.DeadlineExceededError as e:
                outcome, error = "deadline_exceeded", f"{e}"
            except kvferry.KvferryError as e:
                outcome, error = "transfer_failed", f"{type(e).__name__}: {e}"
            if outcome is not None:
                self._end_pull(rid, outcome, error)

    def _advance(self, pull: _Pull) -> tuple[str | None, str]:
        """Moves a pull on (data READ, then generation READ); its (outcome, error) once it
        ended, (None, "") while in flight."""
        if pull.generations_read is None:
            if pull.transfer.poll() != kvferry.XferState.DONE:
                return self._overdue(pull)
            self._post_generations_read(pull)
            try:
                pull.generations_read.wait(_GENERATIONS_WAIT_MS)
            except kvferry.DeadlineExceededError:
                return None, ""   # not yet: the next step polls it (and sees its own deadline)
        elif pull.generations_read.poll() != kvferry.XferState.DONE:
            return self._overdue(pull)
        return _compare_generations(pull)

    def _overdue(self, pull: _Pull) -> tuple[str | None, str]:
        if time.monotonic() > pull.deadline + 1.0:
            return "deadline_exceeded", f"no completion {self._cfg.load_timeout_ms} ms after post"
        return None, ""

    def _end_pull(self, rid: str, outcome: str, error: str) -> None:
        pull = self._pulls.pop(rid)
        for xfer in (pull.transfer, pull.generations_read):
            try:
                if xfer is not None:
                    xfer.release()
            except kvferry.KvferryError:
                pass
        if pull.generations_region is not None:
            self._agent.deregister_memory(pull.generations_region)
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
                        f", relayout from {pull.info.layout.block_size_logical}-token blocks"
                        if relayout else "")
            return
        if outcome != "generation_changed":   # nothing against P itself
            self._forget_peer(pull.peer_key)
        self._fail(pull.spec, outcome, error)

    def _relayout(self, pull: _Pull) -> None:
        from kvferry.vllm.relayout import relayout_into
        spec = pull.spec
        br = pull.info.layout.block_size_logical
        relayout_into(self._kv_caches, self._layout, pull.info.layout, pull.staging,
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

    def _grant_holds(self, holds: dict) -> None:
        now = time.monotonic()
        for rid, hold in holds.items():
            early = self._early.pop(rid, None)
            # The scheduler's mirror granted this hold, so the request id holds nothing here
            # (the mirror ends a hold only after this table did). A block past this rank's
            # table cannot be read by a D either (it checks P's layout), so it needs no lease.
            self._leases.grant(rid, [LogicalBlockId(b) for b in hold.block_ids
                                     if 0 <= b < self._leases.num_blocks],
                               lease_s=hold.lease_s)
            self._hold_leases[rid] = hold.lease
            if early is not None and early[0] == hold.lease:  # D read it before it got here
                self._end_hold(rid, now, expired=False)

    def _poll_holds(self) -> None:
        now = time.monotonic()
        for note in self._agent.get_notifications():
            done = parse_done_message(note.message)
            if done is None:
                continue
            lease, rid = done
            if self._hold_leases.get(rid) == lease:
                self._end_hold(rid, now, expired=False)
            elif rid not in self._hold_leases and self._ended.get(rid, ("",))[0] != lease:
                self._early[rid] = (lease, now)   # its hold reaches this worker later
        for rid in self._leases.end_expired():
            logger.warning("KvferryConnector: lease of %s expired (%.0f s) without D's "
                           "notification; freeing its blocks", rid, self._cfg.lease_timeout_s)
            self._end_hold(rid, now, expired=True)
        self._forget(now)

    def _end_hold(self, rid: str, now: float, expired: bool) -> None:
        """Ends rid's hold in the table (bumping its generations; already done for an expired
        one), then tells vLLM it may free the blocks."""
        self._leases.end(rid)
        self._ended[rid] = (self._hold_leases.pop(rid, ""), now)
        self._stats.data["leases_expired" if expired else "sends_read"] += 1
        self._finished_sending.add(rid)

    def _forget(self, now: float) -> None:
        for rid in [r for r, (_, t) in self._ended.items() if now - t > _REMEMBER_S]:
            del self._ended[rid]
        for rid in [r for r, (_, t) in self._early.items() if now - t > _REMEMBER_S]:
            del self._early[rid]

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
        if self._server is not None:
            self._server.close()
            self._server = None
        for rid in list(self._pulls):
            try:
                self._pulls.pop(rid).transfer.release()
            except kvferry.KvferryError:
                pass
        self._agent.close()


def _check_generations_spec(spec: LoadSpec, info: PeerInfo) -> None:
    """ValueError unless the load names one generation per remote block, all in P's table."""
    if len(spec.remote_block_generations) != len(spec.remote_block_ids):
        raise ValueError(f"{len(spec.remote_block_generations)} remote_block_generations for "
                         f"{len(spec.remote_block_ids)} remote_block_ids")
    n = info.layout.num_blocks_logical
    bad = [b for b in spec.remote_block_ids if not 0 <= b < n]
    if bad:
        raise ValueError(f"remote block {bad[0]} outside P's {n} blocks")


def _compare_generations(pull: _Pull) -> tuple[str, str]:
    """("pulled", "") when P's generations, read after the data, are the ones its scheduler
    granted; ("generation_changed", why) otherwise."""
    spec = pull.spec
    now = struct.unpack(f"<{len(spec.remote_block_ids)}Q", pull.generations)
    for block, want, got in zip(spec.remote_block_ids, spec.remote_block_generations, now):
        if want != got:
            return ("generation_changed",
                    f"P's block {block} is at generation {got}, granted at {want}: P gave it "
                    "back before the read was done (lease ran out or another D read it), so "
                    "it may have been reused")
    return "pulled", ""


def _tp_rank() -> int:
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return int(get_tensor_model_parallel_rank())
    except (ImportError, AssertionError, AttributeError):
        return 0
