"""Reads a vLLM /metrics page (Prometheus text) on stdin and prints, as one JSON object, what
bench/vllm/compare.sh needs of a D instance: prompt tokens served, and each connector's pull
(transfer) time histogram's sum and count and its failure counters, summed over labels.
Runs under build/venv's python (prometheus_client comes with vLLM)."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

WANT = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:kvferry_pull_seconds_sum": "kvferry_pull_s",
    "vllm:kvferry_pull_seconds_count": "kvferry_pulls",
    "vllm:kvferry_pull_failures_total": "kvferry_failures",
    "vllm:kvferry_bytes_pulled_total": "kvferry_bytes",
    "vllm:kvferry_descriptors_total": "kvferry_descriptors",
    "vllm:nixl_xfer_time_seconds_sum": "nixl_pull_s",
    "vllm:nixl_xfer_time_seconds_count": "nixl_pulls",
    "vllm:nixl_num_failed_transfers_total": "nixl_failures",
    "vllm:nixl_bytes_transferred_sum": "nixl_bytes",
    "vllm:nixl_num_descriptors_sum": "nixl_descriptors",
}

out = {v: 0.0 for v in WANT.values()}
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        if sample.name in WANT:
            out[WANT[sample.name]] += sample.value
print(json.dumps(out))
