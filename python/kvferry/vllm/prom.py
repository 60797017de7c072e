"""KvferryConnector's Prometheus metrics on vLLM's /metrics endpoint.

vLLM's API server builds one KvferryPromMetrics (KvferryConnector.build_prom_metrics) and feeds
it every KvferryStats.data the workers reported (metadata.py): counters of pulls, failed
pulls, bytes and descriptors on D, of reads and expired leases on P, and a histogram of each
pull's duration. Names follow vLLM's own connectors ("vllm:" prefix, one child per engine
label); a Counter named X is exposed as X_total.

Thread-safety: called from vLLM's stats logger only.
"""

from kvferry.vllm.metadata import COUNTERS

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics
from vllm.v1.metrics.utils import create_metric_per_engine

# Help text per KvferryStats counter; the metric is "vllm:kvferry_<counter>". Every counter
# must have one: a counter added to metadata.COUNTERS without it fails at import.
_HELP = {
    "pulls": "KV pulls that landed in this D's blocks.",
    "pull_failures": "KV pulls that failed (handshake, transfer, deadline, lease, relayout); "
                     "vLLM recomputed those blocks.",
    "bytes_pulled": "Bytes of KV this D pulled.",
    "descriptors": "Transfer descriptors posted for pulls, after coalescing adjacent blocks.",
    "sends_read": "Requests whose KV a D read from this P (D's notification arrived).",
    "leases_expired": "Requests whose KV lease on this P ran out before any D read it; their "
                      "blocks were freed.",
}
assert set(_HELP) == set(COUNTERS), set(_HELP) ^ set(COUNTERS)
_PULL_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                         2.5, 5.0, 10.0)


class KvferryPromMetrics(KVConnectorPromMetrics):
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {
            key: create_metric_per_engine(
                self._counter_cls(name=f"vllm:kvferry_{key}", documentation=_HELP[key],
                                  labelnames=labelnames),
                per_engine_labelvalues)
            for key in COUNTERS}
        self._pull_seconds = create_metric_per_engine(
            self._histogram_cls(name="vllm:kvferry_pull_seconds",
                                documentation="Time from posting a pull to its last byte "
                                              "landing (and its relayout, if any).",
                                buckets=list(_PULL_SECONDS_BUCKETS), labelnames=labelnames),
            per_engine_labelvalues)

    def observe(self, transfer_stats_data: dict, engine_idx: int = 0):
        for key, per_engine in self._counters.items():
            n = transfer_stats_data.get(key, 0)
            if n:
                per_engine[engine_idx].inc(n)
        for ms in transfer_stats_data.get("pull_ms", ()):
            self._pull_seconds[engine_idx].observe(ms / 1e3)
