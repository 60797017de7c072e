"""What KvferryConnector's two halves tell each other, and its stats.

    scheduler --KvferryConnectorMetadata (per step)--> worker : pulls to start, P's holds,
                                                                host-buffer saves, releases
    worker --KvferryWorkerMetadata (per step)--> scheduler    : each finished pull's record
    worker --KvferryStats--> vLLM's stats logger              : counts of pulls, bytes, failures

All are pickled between vLLM's processes: plain dataclasses of plain values.
Thread-safety: values; KvferryStats is aggregated by one thread at a time.
"""

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata, KVConnectorWorkerMetadata)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats


@dataclass
class LoadSpec:
    """One D request's pull, as kvferry's connector takes it (LoadSpec in
    include/kvferry/connector/connector.h): tokens [num_local_computed_tokens,
    + num_external_tokens) of P's offer ``params`` (its kv_transfer_params: P's logical blocks,
    their generations, where P is) into ``local_block_ids``, all of the request's blocks on D
    (logical ids). Each side's block size is its own; the connector maps tokens to blocks."""

    request_id: str
    params: dict
    local_block_ids: list[int]
    num_local_computed_tokens: int
    num_external_tokens: int


@dataclass(frozen=True)
class Hold:
    """P: a finished request's blocks (logical ids), held for D until D's notification, D's
    release or the lease time, and the generations the scheduler's mirror granted them at
    (what D was promised; the worker checks its own table gives the same)."""

    block_ids: tuple[int, ...] = ()
    generations: tuple[int, ...] = ()


@dataclass(frozen=True)
class Save:
    """P with the host buffer: tokens [token_begin, token_end) of a request were computed this
    step, in ``block_ids`` (all of its blocks so far); the worker stages them after the
    forward pass, before the request can finish."""

    request_id: str
    block_ids: tuple[int, ...]
    token_begin: int
    token_end: int


@dataclass
class KvferryConnectorMetadata(KVConnectorMetadata):
    loads: list[LoadSpec] = field(default_factory=list)
    # P: finished requests whose blocks stay until D's notification or the lease runs out.
    holds: dict[str, Hold] = field(default_factory=dict)
    saves: list[Save] = field(default_factory=list)
    # D: P's offers this D needs nothing of (its prefix cache held the prompt): P is told to
    # end their leases now.
    releases: list[dict] = field(default_factory=list)


@dataclass
class KvferryWorkerMetadata(KVConnectorWorkerMetadata):
    # request id -> {"outcome": "pulled" | "failed_handshake" | "failed_transfer" |
    #                "failed_deadline" | "failed_generation" (kvferry's LoadOutcome names),
    #                "pulled_tokens": int, "pulled_bytes": int, "descriptors": int (the names
    #                of kvferry serve's kv_load), "ms": float and "relayout": bool
    #                (pulled), "error": str (failures), "ranks": int (TP ranks it merges;
    #                see merge_records)}
    records: dict[str, dict] = field(default_factory=dict)

    def aggregate(self, other: "KvferryWorkerMetadata") -> "KvferryWorkerMetadata":
        out = dict(self.records)
        for rid, rec in other.records.items():
            out[rid] = merge_records(out.get(rid), rec)
        return KvferryWorkerMetadata(out)


def merge_records(mine: dict | None, rec: dict) -> dict:
    """One request's record from two TP ranks' (each pulls its own heads, and they may report
    in different steps): the worst outcome, bytes and descriptors summed, the slowest ms, and
    "ranks" how many reported. pulled_tokens is each rank's (every rank pulls the same tokens,
    its own heads of them)."""
    if mine is None:
        return dict(rec, ranks=rec.get("ranks", 1))
    merged = dict(mine)
    merged["pulled_bytes"] = mine.get("pulled_bytes", 0) + rec.get("pulled_bytes", 0)
    merged["descriptors"] = mine.get("descriptors", 0) + rec.get("descriptors", 0)
    merged["ranks"] = mine.get("ranks", 1) + rec.get("ranks", 1)
    if "ms" in rec:
        merged["ms"] = max(mine.get("ms", 0.0), rec["ms"])
    if rec.get("outcome") != "pulled":
        merged["outcome"] = rec["outcome"]
        merged["error"] = rec.get("error", "")
    return merged


# D: pulls that landed, pulls that failed (vLLM recomputes those blocks), their bytes and
# descriptors. P: requests whose blocks a D read (its notification came), and requests whose
# lease ran out unread.
COUNTERS = ("pulls", "pull_failures", "bytes_pulled", "descriptors", "sends_read",
             "leases_expired")


@dataclass
class KvferryStats(KVConnectorStats):
    """Counters since the last interval plus each pull's milliseconds."""

    def __post_init__(self):
        for k in COUNTERS:
            self.data.setdefault(k, 0)
        self.data.setdefault("pull_ms", [])

    def reset(self):
        self.data = {k: 0 for k in COUNTERS}
        self.data["pull_ms"] = []

    def aggregate(self, other: KVConnectorStats) -> "KvferryStats":
        for k in COUNTERS:
            self.data[k] = self.data.get(k, 0) + other.data.get(k, 0)
        self.data["pull_ms"] = list(self.data.get("pull_ms", [])) + list(
            other.data.get("pull_ms", []))
        return self

    def reduce(self) -> dict[str, int | float]:
        ms = self.data.get("pull_ms", [])
        out = {k: self.data.get(k, 0) for k in COUNTERS}
        out["avg_pull_ms"] = round(sum(ms) / len(ms), 3) if ms else 0.0
        return out

    def is_empty(self) -> bool:
        return all(self.data.get(k, 0) == 0 for k in COUNTERS)
