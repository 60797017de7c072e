"""Side-channel bad input and security (docs/reliability.md).

Garbage, truncated, multi-frame, newer-version and wrong-operation messages get a clear error
reply and P keeps serving; a wrong compat hash is refused by the reader; with auth_token set, a
handshake without (or with a wrong) token is refused; the side channel listens only on the
configured address.
"""
import subprocess

from harness.kvferry_api import decode_body, kv_config, text_of
from harness.runner import check, run_cases, wait_until
from harness.fault_node import Node, colocated_text, parse_args, prefill

args = None
BODY = {"prompt": "side channel " * 4, "max_tokens": 3, "temperature": 0}


def probe(node, mode, token=""):
    out = subprocess.run([args.probe, "127.0.0.1", str(node.side_channel_port), mode, token],
                         capture_output=True, text=True, timeout=20)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    check(out.returncode == 0 and line, f"probe {mode}: rc={out.returncode} {out.stderr}")
    return line[0][len("RESULT "):]


def still_serving(p, token=""):
    r = probe(p, "get-meta", token)
    check(r.startswith("OK engine=p0"), f"P stopped serving metadata: {r}")
    status, resp, _ = p.request("GET", "/health")
    check(status == 200, f"P unhealthy: {status} {resp}")


def case_garbage_and_truncated():
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0")], name="P")
    still_serving(p)
    expect = {
        "raw-garbage": "SENT",
        "garbage": "UNAVAILABLE",  # P's error reply, decoded as Unavailable with its message
        "truncated": "UNAVAILABLE",
        "newer-version": "UNAVAILABLE",
        "wrong-op": "UNAVAILABLE",
    }
    for mode, want in expect.items():
        r = probe(p, mode)
        print(f"  {mode}: {r}")
        check(r.startswith(want), f"{mode}: got {r!r}, want {want}...")
        if want == "UNAVAILABLE":
            check("malformed" in r or "version" in r, f"{mode}: error does not say why: {r}")
        still_serving(p)
    r = probe(p, "multi-frame")
    print(f"  multi-frame: {r}")
    check(not r.startswith("OK"), f"a multi-frame request was served: {r}")
    still_serving(p)
    r = probe(p, "wrong-hash")
    print(f"  wrong-hash: {r}")
    check(r.startswith("FAILED_PRECONDITION") and "not-the-right-hash" in r,
          f"wrong compat hash not refused by name: {r}")
    prefill(p, BODY)  # the engine behind it is fine too


def case_auth_token():
    p = Node(args.node, "serve",
             ["--kv-transfer-config", kv_config("p0", auth_token="s3cret")], name="P")
    for token in ("", "s3cre", "s3cret!", "wrong!"):
        r = probe(p, "get-meta", token)
        print(f"  token {token!r}: {r}")
        check(not r.startswith("OK") and "auth" in r, f"token {token!r} accepted: {r}")
    still_serving(p, "s3cret")
    # A D without the token falls back to recomputing; a D with it pulls.
    params = prefill(p, BODY)
    for token, pulls in (("", 0), ("s3cret", 1)):
        extra = {"auth_token": token} if token else {}
        d = Node(args.node, "serve",
                 ["--kv-transfer-config", kv_config("d0", handshake_timeout_ms=2000, **extra)],
                 name="D")
        body = dict(BODY, kv_transfer_params=params)
        status, resp, _ = d.post(body)
        check(status == 200, f"D (token {token!r}) answered {status}: {resp}")
        check(wait_until(lambda: d.metric("kvferry:kv_transfers_total") == pulls, 3) is not None,
              f"D with token {token!r}: expected {pulls} pulls: {d.metrics()}")
        d.stop()
        params = prefill(p, BODY)


def listening_addresses(port):
    """Local addresses with a LISTEN socket on `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            f = l.split()
            addr, p = f[1].split(":")
            if int(p, 16) == port and f[3] == "0A":
                found.append(addr)
    return found


def case_binds_only_where_configured():
    p = Node(args.node, "serve",
             ["--kv-transfer-config", kv_config("p0", side_channel_host="127.0.0.1")], name="P")
    addrs = listening_addresses(p.side_channel_port)
    print(f"  side channel {p.side_channel_port} listens on {addrs}")
    check(addrs == ["0100007F"], f"side channel listens on {addrs}, want only 127.0.0.1")


def case_out_of_range_block_ids_refused():
    """Remote block ids beyond P's pool are refused before any descriptor is built: no bytes
    move, the load fails as a transfer failure, D recomputes, P is unaffected."""
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0")], name="P")
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], name="D")
    params = prefill(p, BODY)
    bad = dict(params, remote_block_ids=[10 ** 6] * len(params["remote_block_ids"]))
    bad.pop("remote_block_generations", None)
    status, resp, _ = d.post(dict(BODY, kv_transfer_params=bad))
    check(status == 200, f"D answered {status}: {resp}")
    fail = 'kvferry:kv_transfer_failures_total{kind="transfer"}'
    check(wait_until(lambda: d.metric(fail) == 1, 3) is not None, f"not refused: {d.metrics()}")
    check(d.metric("kvferry:kv_transfer_bytes_total") == 0, "bytes moved for invalid ids")
    still_serving(p)


def case_hostile_release():
    """A side-channel peer that releases a hold it never read (it knows the request id; P has
    no auth token here): P frees the blocks early, and the D that then reads them, after other
    prompts reused them, detects it (generation check) and recomputes exactly. Never wrong
    bytes. A release of a request P never held changes nothing."""
    want = colocated_text(args.node, BODY)
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0", lease_ms=30000),
                                  "--num-kv-blocks", "16"], name="P")
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], name="D")
    check(probe(p, "release:no-such-request") == "OK", "release of an unknown request refused")
    params = prefill(p, BODY)
    held = 'kvferry:kv_blocks{state="held_for_transfer"}'
    check(p.metric(held) > 0, f"P holds nothing after its prefill: {p.metrics()}")
    check(probe(p, f"release:{params['remote_request_id']}") == "OK", "release refused")
    check(wait_until(lambda: p.metric(held) == 0, 5) is not None,
          f"the released hold was not freed: {p.metrics()}")
    for i in range(6):  # reuse the freed blocks
        status, resp, _ = p.post({"prompt": f"{i} other text to evict the blocks " * 4,
                                  "max_tokens": 2})
        check(status == 200, f"filler {i}: {status} {resp}")
    status, resp, _ = d.post(decode_body(BODY, params))
    check(status == 200 and text_of(resp) == want, f"D after the hostile release: {status} {resp}")
    gen = 'kvferry:kv_transfer_failures_total{kind="generation"}'
    check(wait_until(lambda: d.metric(gen) == 1, 3) is not None,
          f"reuse after the hostile release not detected: {d.metrics()}")
    still_serving(p)


if __name__ == "__main__":
    args = parse_args()
    run_cases([
        ("garbage_and_truncated", case_garbage_and_truncated),
        ("auth_token", case_auth_token),
        ("binds_only_where_configured", case_binds_only_where_configured),
        ("out_of_range_block_ids_refused", case_out_of_range_block_ids_refused),
        ("hostile_release", case_hostile_release),
    ])
