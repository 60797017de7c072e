"""HTTP bad input (docs/reliability.md): every malformed or out-of-range request body gets a 4xx
OpenAI error body, the server keeps serving, and no block leaks (pool gauges from /metrics).
Syntactically valid but unusable kv_transfer_params (unknown engine, unreachable host,
out-of-range, duplicated or too few block ids) are load failures: D recomputes and the answer is
exactly the colocated one.
"""
import json
import socket
import time

from harness.kvferry_api import is_openai_error, kv_config, text_of
from harness.runner import check, run_cases, wait_until
from harness.fault_node import Node, colocated_text, parse_args, prefill

args = None
BODY = {"prompt": "Bad input must not hurt anyone. " * 3, "max_tokens": 8, "temperature": 0}


def reference(body):
    return colocated_text(args.node, body)


def expect_4xx(node, body, path="/v1/completions", what=""):
    status, resp, _ = node.post(body, path=path)
    check(status is not None and 400 <= status < 500, f"{what}: answered {status}: {resp}")
    check(is_openai_error(resp, status), f"{what}: not an OpenAI error body: {resp}")
    return resp["error"]["message"]


def case_malformed_requests():
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], name="D")
    baseline = d.blocks_in_use()
    big = "x " * 5000  # far over the tiny model's context
    cases = [
        ("malformed JSON", '{"prompt": "x", "max_tokens": '),
        ("empty body", ""),
        ("not an object", "[1, 2, 3]"),
        ("binary junk", b"\xff\xfe\x00garbage"),
        ("prompt wrong type", {"prompt": 5}),
        ("prompt missing", {"max_tokens": 3}),
        ("max_tokens string", {"prompt": "a", "max_tokens": "ten"}),
        ("max_tokens negative", {"prompt": "a", "max_tokens": -1}),
        ("max_tokens zero", {"prompt": "a", "max_tokens": 0}),
        ("max_tokens huge", {"prompt": "a", "max_tokens": 10 ** 12}),
        ("max_tokens float", {"prompt": "a", "max_tokens": 2.5}),
        ("temperature string", {"prompt": "a", "temperature": "hot"}),
        ("temperature negative", {"prompt": "a", "temperature": -1}),
        ("top_p out of range", {"prompt": "a", "top_p": 1.5}),
        ("n > 1", {"prompt": "a", "n": 2}),
        ("stream not bool", {"prompt": "a", "stream": "yes"}),
        ("token ids out of vocab", {"prompt": [1, 2, 10 ** 9]}),
        ("prompt over context", {"prompt": big, "max_tokens": 4}),
        ("kv params not object", {"prompt": "a", "kv_transfer_params": "abc"}),
        ("kv ids not array", {"prompt": "a", "kv_transfer_params": {
            "do_remote_prefill": True, "remote_engine_id": "p0", "remote_request_id": "r",
            "remote_block_ids": "0,1", "remote_host": "127.0.0.1", "remote_port": 1}}),
        ("kv negative id", {"prompt": "a", "kv_transfer_params": {
            "do_remote_prefill": True, "remote_engine_id": "p0", "remote_request_id": "r",
            "remote_block_ids": [-1], "remote_host": "127.0.0.1", "remote_port": 1}}),
        ("kv port out of range", {"prompt": "a", "kv_transfer_params": {
            "do_remote_prefill": True, "remote_engine_id": "p0", "remote_request_id": "r",
            "remote_block_ids": [0], "remote_host": "127.0.0.1", "remote_port": 70000}}),
        ("kv generations count mismatch", {"prompt": "a", "kv_transfer_params": {
            "do_remote_prefill": True, "remote_engine_id": "p0", "remote_request_id": "r",
            "remote_block_ids": [0, 1], "remote_block_generations": [1],
            "remote_host": "127.0.0.1", "remote_port": 1}}),
        ("kv missing fields", {"prompt": "a", "kv_transfer_params": {"do_remote_prefill": True}}),
    ]
    for what, body in cases:
        msg = expect_4xx(d, body, what=what)
        print(f"  {what}: {msg[:100]}")
    expect_4xx(d, {"messages": "hi"}, path="/v1/chat/completions", what="chat messages string")
    expect_4xx(d, {"messages": [{"role": 5, "content": "x"}]}, path="/v1/chat/completions",
               what="chat role not a string")
    expect_4xx(d, {"messages": [{"role": "user", "content": 7}]}, path="/v1/chat/completions",
               what="chat content not text")
    # Unknown fields are ignored, as OpenAI servers do.
    status, resp, _ = d.post({"prompt": "a", "max_tokens": 2, "frobnicate": {"x": [1]}})
    check(status == 200, f"unknown field refused: {status} {resp}")
    check(wait_until(lambda: d.blocks_in_use() == baseline, 3) is not None,
          f"blocks leaked: {d.metrics()}")
    status, _, _ = d.request("GET", "/health")
    check(status == 200, "unhealthy after bad input")


def case_unusable_kv_params():
    want = reference(BODY)
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0", lease_ms=1500)],
             name="P")
    d = Node(args.node, "serve",
             ["--kv-transfer-config", kv_config("d0", handshake_timeout_ms=1500)], name="D")
    p_base = p.blocks_in_use()
    params = prefill(p, BODY)
    n = len(params["remote_block_ids"])
    ids = params["remote_block_ids"]
    variants = {
        "unknown engine": dict(params, remote_engine_id="no-such-engine"),
        "unreachable host": dict(params, remote_host="127.0.0.1", remote_port=1),
        "out-of-range ids": dict(params, remote_block_ids=[2 ** 31 - 1] * n,
                                 remote_block_generations=[1] * n),
        "duplicated ids": dict(params, remote_block_ids=[ids[0]] * n),
        "too few ids": dict(params, remote_block_ids=ids[:1],
                            remote_block_generations=params["remote_block_generations"][:1]),
        "too many ids": dict(params, remote_block_ids=ids + ids,
                             remote_block_generations=params["remote_block_generations"] * 2),
    }
    for what, kv in variants.items():
        if what == "duplicated ids":
            kv = dict(kv, remote_block_generations=[params["remote_block_generations"][0]] * n)
        t0 = time.monotonic()
        status, resp, _ = d.post(dict(BODY, kv_transfer_params=kv))
        print(f"  {what}: {status} in {time.monotonic() - t0:.2f} s, "
              f"text ok={text_of(resp) == want}")
        check(status == 200 or (status is not None and 400 <= status < 500
                                and is_openai_error(resp)), f"{what}: {status} {resp}")
        if status == 200:
            check(text_of(resp) == want, f"{what}: wrong text {text_of(resp)!r} != {want!r}")
    check(wait_until(lambda: d.blocks_in_use() == 0, 5) is not None, f"D leaked: {d.metrics()}")
    # P's lease for the granted blocks ends (no valid reader notified it).
    check(wait_until(lambda: p.blocks_in_use() == p_base, 1.5 + 5) is not None,
          f"P leaked: {p.metrics()}")
    # The real params still work afterwards.
    params = prefill(p, BODY)
    status, resp, _ = d.post(dict(BODY, kv_transfer_params=params))
    check(status == 200 and text_of(resp) == want, f"valid params after bad ones: {resp}")


def raw_exchange(node, data, timeout=30):
    """Sends raw bytes on a new connection; returns (status, body) of the answer (its
    Content-Length bytes: the connection may stay open)."""
    with socket.create_connection((node.host, node.port), timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := s.recv(65536)):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length and (chunk := s.recv(65536)):
            body += chunk
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else None
    return status, body


def case_request_limits():
    """docs/reliability.md, "Request limits": each bound refused with its 4xx just past it and
    accepted at it; the server keeps serving."""
    d = Node(args.node, "serve", name="serve")
    ok = {"prompt": "a", "max_tokens": 2}
    for what, body, fine in [
        ("17 stop strings", dict(ok, stop=[f"s{i}" for i in range(17)]),
         dict(ok, stop=[f"s{i}" for i in range(16)])),
        ("a stop string of 1025 bytes", dict(ok, stop="z" * 1025), dict(ok, stop="z" * 1024)),
        ("1025 stop_token_ids", dict(ok, stop_token_ids=[5] * 1025),
         dict(ok, stop_token_ids=[5] * 1024)),
    ]:
        msg = expect_4xx(d, body, what=what)
        check("at most" in msg, f"{what}: {msg}")
        status, resp, _ = d.post(fine)
        check(status == 200, f"{what}, at the bound: {status} {resp}")
    # A prompt too long in bytes for the context, whatever it tokenizes to: refused before the
    # tokenizer runs, with vLLM's context-length wording (completions and chat).
    huge = "y" * (4 << 20)
    msg = expect_4xx(d, {"prompt": huge}, what="4 MiB prompt")
    check("maximum context length" in msg and "bytes" in msg, f"4 MiB prompt: {msg}")
    msg = expect_4xx(d, {"messages": [{"role": "user", "content": huge}]},
                     path="/v1/chat/completions", what="4 MiB chat message")
    check("bytes" in msg, f"4 MiB chat message: {msg}")
    # HTTP framing limits (httplib's): a header line over 8 KiB, a URI over 8 KiB, a body over
    # the 64 MiB payload limit; each an OpenAI error body.
    request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
    status, body = raw_exchange(d, request + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n")
    check(status == 400 and is_openai_error(json.loads(body), status), f"long header: {status}")
    status, body = raw_exchange(d, b"GET /v1/models?" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")
    check(status == 414 and is_openai_error(json.loads(body), status), f"long URI: {status}")
    big = (64 << 20) + 1
    status, body = raw_exchange(d, request + b"Content-Length: %d\r\n\r\n" % big + b"0" * big)
    check(status == 413 and is_openai_error(json.loads(body), status), f"huge body: {status}")
    # A route asked with another method: 405 naming the allowed ones (a method httplib does not
    # know, QUERY, too), and the connection closed, since the body was not read.
    for line, allowed in [(b"DELETE /v1/completions", "POST"), (b"QUERY /health", "GET"),
                          (b"PUT /v1/models?x=1", "GET")]:
        status, body = raw_exchange(d, line + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        err = json.loads(body)
        check(status == 405 and is_openai_error(err, status) and
              f"allowed: {allowed}" in err["error"]["message"], f"{line}: {status} {body}")
    status, body = raw_exchange(d, b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    check(status == 404 and is_openai_error(json.loads(body), status), f"unknown path: {status}")
    status, resp, _ = d.post(BODY)
    check(status == 200, f"after the limits: {status} {resp}")


if __name__ == "__main__":
    args = parse_args()
    run_cases([
        ("malformed_requests", case_malformed_requests),
        ("request_limits", case_request_limits),
        ("unusable_kv_params", case_unusable_kv_params),
    ])
