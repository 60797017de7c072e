"""KV events between kvferry and vLLM, both ways (docs/kv_events.md):

1. `kvferry serve --kv-events-config` publishes; vLLM's own msgspec types
   (vllm.distributed.kv_events.KVEventBatch) decode every payload, and the stored blocks hold
   the prompt's token ids as the Hugging Face tokenizer gives them. A replay request, sent as
   vLLM's subscribers send it, is answered with the history and the end marker.
2. `vllm serve --kv-events-config` publishes; `kvferry kv-events` reads it and prints the
   prompt's blocks.

Usage: build/venv/bin/python tests/vllm/test_kv_events.py MODEL_DIR LOG_DIR KVFERRY_BIN
       (PYTHONPATH=tests)
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import msgspec  # noqa: E402
import zmq  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from vllm.distributed.kv_events import (AllBlocksCleared, BlockStored,  # noqa: E402
                                        KVEventBatch)

from harness import procs, runner, web  # noqa: E402
from harness.runner import check  # noqa: E402
import vllm_serve as vs  # noqa: E402

MODEL_DIR, LOG_DIR, KVFERRY = sys.argv[1], sys.argv[2], sys.argv[3]
BLOCK = 16        # kvferry serve's
VLLM_BLOCK = 32   # vLLM's CPU attention takes multiples of 32
PROMPT = " ".join(f"word{i}" for i in range(40))


def events_config(pub_port, replay_port, host="127.0.0.1"):
    """vLLM binds its PUB socket only for a wildcard host (it connects otherwise); kvferry always
    binds."""
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                       "endpoint": f"tcp://{host}:{pub_port}",
                       "replay_endpoint": f"tcp://{host}:{replay_port}"})


def prompt_ids():
    return AutoTokenizer.from_pretrained(MODEL_DIR)(PROMPT)["input_ids"]


def full_blocks(ids, block=BLOCK):
    n = len(ids) // block * block
    return ids[:n]


def case_vllm_reads_kvferry():
    os.makedirs(LOG_DIR, exist_ok=True)
    http, pub, replay = procs.free_port(), procs.free_port(), procs.free_port()
    server = procs.LoggedProcess(
        "kvferry-serve",
        [KVFERRY, "serve", "--model", MODEL_DIR, "--port", str(http), "--block-size", str(BLOCK),
         "--kv-events-config", events_config(pub, replay)],
        f"{LOG_DIR}/kvferry_serve.log")
    check(runner.wait_until(lambda: web.request("127.0.0.1", http, "GET", "/v1/models",
                                                timeout=2).status == 200, 120) is not None,
          f"kvferry serve did not come up:\n{server.log_text()[-2000:]}")
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{pub}")
    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    runner.wait_until(lambda: False, 0.5)  # the subscription settles
    r = web.request("127.0.0.1", http, "POST", "/v1/completions",
                    {"model": MODEL_DIR, "prompt": PROMPT, "max_tokens": 1}, timeout=60)
    check(r.status == 200, f"completion: HTTP {r.status} {r.raw[:300]}")
    check(sub.poll(10000), "no KV event within 10 s of the answer")
    topic, seq, payload = sub.recv_multipart()
    batch = decoder.decode(payload)
    stored = [e for e in batch.events if isinstance(e, BlockStored)]
    check(stored, f"no BlockStored in {batch}")
    want = full_blocks(prompt_ids())
    check(stored[0].token_ids == want,
          f"stored tokens {stored[0].token_ids} are not the prompt's blocks {want}")
    check(stored[0].block_size == BLOCK and len(stored[0].block_hashes) == len(want) // BLOCK,
          f"block size / count: {stored[0]}")
    check(stored[0].parent_block_hash is None and stored[0].medium == "CPU", f"{stored[0]}")
    check(batch.data_parallel_rank == 0, f"rank {batch.data_parallel_rank}")

    # Replay from 0, as vLLM's example subscriber asks (a REQ-style request): seq 0 is the clear.
    req = ctx.socket(zmq.DEALER)
    req.connect(f"tcp://127.0.0.1:{replay}")
    req.send_multipart([b"", (0).to_bytes(8, "big")])
    frames = []
    while req.poll(5000):
        frames.append(req.recv_multipart())
        if int.from_bytes(frames[-1][2], "big", signed=True) == -1:
            break
    check(len(frames) >= 3, f"replay answered {len(frames)} messages")
    first = decoder.decode(frames[0][3])
    check(int.from_bytes(frames[0][2], "big") == 0 and
          isinstance(first.events[0], AllBlocksCleared), f"replay starts with {first}")
    check(frames[-1][3] == b"", "no end marker")
    server.stop()
    print(f"  vLLM decoded kvferry's events: {len(stored[0].block_hashes)} blocks stored",
          flush=True)


def case_kvferry_reads_vllm():
    os.makedirs(LOG_DIR, exist_ok=True)
    http, pub, replay = 18331, procs.free_port(), procs.free_port()
    s = vs.VllmServer("vllm-events", MODEL_DIR, http, f"{LOG_DIR}/vllm_events.log",
                      extra_args=("--enable-prefix-caching", "--block-size", str(VLLM_BLOCK),
                                  "--kv-events-config", events_config(pub, replay, "*")))
    s.wait_ready()
    out_path = f"{LOG_DIR}/kvferry_kv_events.jsonl"
    with open(out_path, "w") as out:
        reader = subprocess.Popen(
            [KVFERRY, "kv-events", "--endpoint", f"tcp://127.0.0.1:{pub}",
             "--replay-endpoint", f"tcp://127.0.0.1:{replay}", "--idle-timeout", "20"],
            stdout=out, stderr=subprocess.PIPE, text=True)
        runner.wait_until(lambda: False, 1.0)
        s.post("/v1/completions", {"model": vs.MODEL_NAME, "prompt": PROMPT, "max_tokens": 1})
        _, err = reader.communicate(timeout=60)
    lines = [json.loads(x) for x in open(out_path) if x.strip()]
    stored = [e for b in lines for e in b["events"] if e["type"] == "BlockStored"]
    check(stored, f"kvferry kv-events printed no BlockStored; stderr: {err}")
    want = full_blocks(prompt_ids(), VLLM_BLOCK)
    tokens = [t for e in stored for t in e["token_ids"]]
    check(tokens[:len(want)] == want, f"vLLM's stored tokens {tokens} are not the prompt's {want}")
    check(all(e["block_size"] == VLLM_BLOCK for e in stored), f"{stored}")
    check(any(not b["replayed"] for b in lines), "every batch came by replay, none live")
    check(" 0 garbage" in err, f"kvferry kv-events: {err}")
    s.kill()
    print(f"  kvferry read vLLM's events: {len(stored)} BlockStored", flush=True)


runner.run_cases([("vllm_reads_kvferry", case_vllm_reads_kvferry),
                  ("kvferry_reads_vllm", case_kvferry_reads_vllm)])
