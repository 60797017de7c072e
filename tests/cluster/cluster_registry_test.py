"""A cluster on loopback, found through etcd (docs/reliability.md, "Cluster"): members joining
and leaving, prefix affinity, routing by KV events, conditional disaggregation, etcd going away
and coming back, bad registry data, two proxies.
Real processes: etcd, `kvferry serve --registry`, `kvferry proxy --registry`.
"""
import os
import time

from cluster_harness import CASE, Etcd, Kvferry, colocated_reference, parse_args, proxy, run, serve
from harness.runner import check, measure, wait_until

args = None
TTL_S = 3
SLACK_S = 5.0


def body(prompt, n=6, **kw):
    return dict({"prompt": prompt, "max_tokens": n, "temperature": 0}, **kw)


def assert_pulled(resp, what):
    """The answer's KV came from a P (a recompute gives the same text, so the text proves
    nothing about P/D)."""
    load = resp.get("kv_load") if isinstance(resp, dict) else None
    check(load is not None and load.get("outcome") in ("pulled", "notify_only"),
          f"{what}: KV not pulled: kv_load={load}")


def member_load(px, member_id):
    for m in px.table()["members"]:
        if m["id"] == member_id:
            return m.get("load") or {}
    return {}


def case_members_join_and_leave():
    etcd = Etcd()
    reg = etcd.registry()
    p0 = serve(args.kvferry, "p0", "kv_producer", reg, ttl=TTL_S)
    d0 = serve(args.kvferry, "d0", "kv_consumer", reg, ttl=30)  # leaves by deregistering
    px = proxy(args.kvferry, "proxy", reg)
    check(wait_until(lambda: px.members("healthy") == ["d0", "p0"], 20) is not None,
          f"proxy sees {px.members()}")
    prompts = [body(f"join and leave {i}: " + "x" * (20 + 30 * i)) for i in range(6)]
    want = colocated_reference(args.kvferry, prompts)
    for b in prompts:
        status, resp, hdr = px.complete(b)
        check(status == 200, f"{status} {resp}")
        check(resp["choices"][0]["text"] == want[(b["prompt"], b["max_tokens"])], "text differs")
        check(hdr.get("X-Kvferry-Prefill") == "p0" and hdr.get("X-Kvferry-Decode") == "d0",
              f"routed to {hdr}")
        assert_pulled(resp, "through the proxy")

    d1 = serve(args.kvferry, "d1", "kv_consumer", reg, ttl=TTL_S)  # joins without a restart
    check(wait_until(lambda: "d1" in px.members("healthy"), 20) is not None, "d1 never joined")
    # Routing weighs D's reported free blocks: wait until the proxy has d1's real figures.
    check(wait_until(lambda: member_load(px, "d1").get("total_kv_blocks", 0) > 0, 20) is not None,
          "d1's load never reported")
    decoders = set()
    for b in prompts:
        status, resp, hdr = px.complete(b)
        check(status == 200, f"{status} {resp}")
        decoders.add(hdr.get("X-Kvferry-Decode"))
    check(decoders == {"d0", "d1"},
          f"decode legs went to {decoders}; the proxy's table: {px.table()['members']}")

    # A clean shutdown deletes the key at once: d0 (30 s lease) leaves long before its lease
    # could run out.
    t0 = time.monotonic()
    check(d0.stop() == 0, "d0 did not exit 0")
    check(wait_until(lambda: "d0" not in px.members(), 10) is not None, "d0 still listed")
    measure("cluster.clean_shutdown_leaves", time.monotonic() - t0, 10)
    check("d0" not in etcd.ctl("get", "--prefix", "/kvferry/test/members/", "--keys-only"),
          "d0's key is still in etcd")
    # A killed member leaves when its lease runs out.
    t0 = time.monotonic()
    d1.kill()
    check(wait_until(lambda: "d1" not in px.members(), TTL_S + SLACK_S) is not None,
          "killed d1 still listed")
    measure("cluster.killed_member_leaves", time.monotonic() - t0, TTL_S + SLACK_S)
    status, resp, _ = px.complete(prompts[0])
    check(status == 503 and "no decode instance" in str(resp), f"no D left: {status} {resp}")
    check(px.stop() == 0 and p0.stop() == 0, "exit codes")


def case_prefix_affinity():
    etcd = Etcd()
    reg = etcd.registry()
    ps = [serve(args.kvferry, f"p{i}", "kv_producer", reg) for i in range(2)]
    d = serve(args.kvferry, "d0", "kv_consumer", reg)
    px = proxy(args.kvferry, "proxy", reg)
    check(wait_until(lambda: len(px.members("healthy")) == 3, 20) is not None, "members")
    # Block size 16, one byte per token: 160 shared bytes are 10 shared blocks.
    shared = "".join(chr(ord("a") + (i * 7) % 26) for i in range(160))
    hits_before = {p.name: p.metric("kvferry:prefix_cache_hit_tokens_total") for p in ps}
    homes = []
    for i in range(4):
        status, resp, hdr = px.complete(body(shared + f" question {i}?"))
        check(status == 200, f"{status} {resp}")
        homes.append(hdr.get("X-Kvferry-Prefill"))
    check(len(set(homes)) == 1, f"prompts sharing 10 blocks went to {homes}")
    home = next(p for p in ps if p.name == homes[0])
    other = next(p for p in ps if p.name != homes[0])
    gained = home.metric("kvferry:prefix_cache_hit_tokens_total") - hits_before[home.name]
    check(gained >= 3 * 160, f"{home.name}'s prefix cache hit {gained} tokens, want >= 480")
    check(other.metric("kvferry:prefix_cache_hit_tokens_total") == hits_before[other.name],
          f"{other.name} served part of the family")
    # Other prefixes spread over both P.
    spread = set()
    for i in range(12):
        status, _, hdr = px.complete(body(chr(ord("A") + i) * 130 + " tail"))
        spread.add(hdr.get("X-Kvferry-Prefill"))
    check(spread == {"p0", "p1"}, f"other prefixes went to {spread}")
    check(px.metric('kvferry:proxy_routes_total{leg="prefill",reason="affinity"}') >= 16,
          "affinity routes not counted")
    del d


def case_registry_goes_away_and_comes_back():
    etcd = Etcd()
    reg = etcd.registry()
    p = serve(args.kvferry, "p0", "kv_producer", reg, ttl=TTL_S)
    d = serve(args.kvferry, "d0", "kv_consumer", reg, ttl=TTL_S)
    px = proxy(args.kvferry, "proxy", reg)
    check(wait_until(lambda: len(px.members("healthy")) == 2, 20) is not None, "members")
    check(px.metric("kvferry:proxy_registry_connected") == 1, "not connected")
    b = body("while etcd is away " * 4)

    t0 = time.monotonic()
    etcd.stop()
    check(wait_until(lambda: px.metric("kvferry:proxy_registry_connected") == 0, 10) is not None,
          "the proxy did not notice etcd going away")
    measure("cluster.registry_loss_noticed", time.monotonic() - t0, 10)
    check(px.wait_log(r"registry .* unreachable: .*routing to the 2 last known members", 5),
          "no log line about the registry")
    for _ in range(3):  # the last known members keep serving, past the lease TTL too
        status, resp, _ = px.complete(b)
        check(status == 200, f"with etcd down: {status} {resp}")
        assert_pulled(resp, "with etcd down")
        time.sleep(TTL_S / 2)
    check(px.members("healthy") == ["d0", "p0"], f"members with etcd down: {px.members()}")

    etcd.start()  # same data directory: the keys and leases are back
    check(wait_until(lambda: px.metric("kvferry:proxy_registry_connected") == 1, 15) is not None,
          "the proxy did not reconnect")
    d1 = serve(args.kvferry, "d1", "kv_consumer", reg, ttl=TTL_S)
    check(wait_until(lambda: "d1" in px.members("healthy"), 15) is not None,
          "a member registered after etcd came back was not seen: the watch did not resume")
    check(px.members() == ["d0", "d1", "p0"], f"members after etcd came back: {px.members()}")
    check(p.alive() and d.alive() and d1.alive(), "an instance died")


def case_bad_registry_data_is_ignored():
    etcd = Etcd()
    reg = etcd.registry()
    prefix = "/kvferry/test/members/"
    p = serve(args.kvferry, "p0", "kv_producer", reg)
    d = serve(args.kvferry, "d0", "kv_consumer", reg)
    px = proxy(args.kvferry, "proxy", reg)
    etcd.ctl("put", prefix + "garbage", "{not json at all")
    etcd.ctl("put", prefix + "wrong-types", '{"version":1,"role":"decode","url":42}')
    etcd.ctl("put", prefix + "ghost", '{"version":1,"role":"decode","url":"http://127.0.0.1:1",'
             '"engine_id":"ghost","side_channel":"","model":"tiny","tp_size":1,'
             '"kv_blocks_total":64,"block_size":16}')
    check(wait_until(lambda: px.members("healthy") == ["d0", "p0"] and "ghost" in px.members(),
                     20) is not None, f"members: {px.table()}")
    check(px.wait_log(r"registry: ignoring /kvferry/test/members/garbage", 5), "no log for garbage")
    check(px.wait_log(r"registry: ignoring /kvferry/test/members/wrong-types .*url", 5),
          "no log for wrong types")
    check(px.wait_log(r"member ghost .* does not answer", 5), "no log for the unreachable member")
    check(px.metric('kvferry:proxy_registry_events_total{kind="invalid"}') >= 2, "not counted")
    for i in range(8):
        status, resp, hdr = px.complete(body(f"bad data {i} " * 5))
        check(status == 200 and hdr.get("X-Kvferry-Decode") == "d0", f"{status} {resp} {hdr}")
    check(p.alive() and d.alive(), "an instance died")


EVENTS = ("--kv-events-config", '{"enable_kv_cache_events": true, "endpoint": '
          '"tcp://127.0.0.1:0", "replay_endpoint": "tcp://127.0.0.1:0"}')


def case_kv_routing():
    """--routing kv (the proxy's default) with members publishing KV events: a family of prompts
    sharing a document goes where the document is cached, the next family to the other P; the
    index's predictions match what P reports cached; answers equal colocated, and are pulled;
    a second proxy routes each family where the first did."""
    etcd = Etcd()
    reg = etcd.registry()
    ps = [serve(args.kvferry, f"p{i}", "kv_producer", reg, args=EVENTS) for i in range(2)]
    d = serve(args.kvferry, "d0", "kv_consumer", reg, args=EVENTS)
    px = proxy(args.kvferry, "proxy", reg)
    check(wait_until(lambda: len(px.members("healthy")) == 3, 20) is not None, "members")
    check(wait_until(lambda: all(f'kvferry:proxy_kv_index_blocks{{member="{m}"}}' in px.metrics()
                                 for m in ("p0", "p1", "d0")), 20) is not None,
          "the proxy does not follow every member's events")
    docs = ["".join(chr(ord("a") + (i * k) % 26) for i in range(160)) for k in (7, 11)]
    prompts = [body(doc + f" question {q}?") for doc in docs for q in range(4)]
    want = colocated_reference(args.kvferry, prompts)
    homes = {}
    for n, b in enumerate(prompts):
        family = n // 4
        status, resp, hdr = px.complete(b)
        check(status == 200, f"{status} {resp}")
        check(resp["choices"][0]["text"] == want[(b["prompt"], b["max_tokens"])], "text differs")
        assert_pulled(resp, f"prompt {n}")
        homes.setdefault(family, []).append(hdr.get("X-Kvferry-Prefill"))
        if n % 4 == 0:  # the family's first answer: wait until its blocks are in the index
            home = hdr.get("X-Kvferry-Prefill")
            check(wait_until(lambda: px.metric(
                f'kvferry:proxy_kv_index_blocks{{member="{home}"}}') >= 10, 10)
                is not None, f"{home}'s blocks never reached the index")
    check(all(len(set(h)) == 1 for h in homes.values()), f"families were split: {homes}")
    check(homes[0][0] != homes[1][0], f"both families went to {homes[0][0]}")
    # A second proxy, following the same events, sends each family where the first did.
    px2 = proxy(args.kvferry, "proxy2", reg)
    check(wait_until(lambda: all(px2.metric(f'kvferry:proxy_kv_index_blocks{{member="{h[0]}"}}')
                                 >= 10 for h in homes.values()), 20) is not None,
          "the second proxy does not follow the members' events")
    for family, doc in enumerate(docs):
        b = body(doc + " one more question?")
        status, resp, hdr = px2.complete(b)
        check(status == 200, f"second proxy: {status} {resp}")
        check(hdr.get("X-Kvferry-Prefill") == homes[family][0],
              f"the proxies disagree on family {family}: {hdr.get('X-Kvferry-Prefill')} against "
              f"{homes[family][0]}")
    hits = px.metric('kvferry:proxy_routes_total{leg="prefill",reason="kv_hit"}')
    check(hits >= 6, f"{hits} prefill routes were kv hits, want >= 6")
    predicted = px.metric('kvferry:proxy_kv_prefix_tokens_total{kind="predicted"}')
    actual = px.metric('kvferry:proxy_kv_prefix_tokens_total{kind="actual"}')
    check(predicted >= 6 * 160 and actual >= predicted - 6,
          f"predicted {predicted} cached tokens, P reported {actual}")
    check(px.metric('kvferry:proxy_kv_predictions_total{kind="missed"}') == 0, "missed hits")
    for m in ps + [d]:
        check(px.metric(f'kvferry:proxy_kv_events_total{{member="{m.name}",kind="refused_hash"}}')
              == 0, f"{m.name}'s events refused")
        check(wait_until(lambda: m.blocks_in_use() == 0, 10) is not None, f"{m.name} holds blocks")


def case_disk_tier_survives_a_restart():
    """--kv-offload-dir: a P restarted with its disk tier announces the blocks its files hold
    (STORAGE events, before any request), the proxy routes the document's next question back to
    it, and it reads the document's blocks from disk instead of computing them. Answers equal
    colocated, and are pulled."""
    etcd = Etcd()
    reg = etcd.registry()

    def start_p(i):
        disk = ("--kv-offload-dir", os.path.join(CASE["dir"], f"disk{i}"), "--kv-offload-gb", "0.05")
        return serve(args.kvferry, f"p{i}", "kv_producer", reg, args=EVENTS + disk)

    ps = [start_p(0), start_p(1)]
    serve(args.kvferry, "d0", "kv_consumer", reg, args=EVENTS)
    px = proxy(args.kvferry, "proxy", reg)

    def following(home, blocks):
        return (len(px.members("healthy")) == 3 and
                px.metric(f'kvferry:proxy_kv_index_blocks{{member="{home}"}}') >= blocks)

    check(wait_until(lambda: following("p0", 0) and following("p1", 0), 20) is not None,
          "the proxy does not follow the members' events")
    doc = "".join(chr(ord("a") + (i * 13) % 26) for i in range(160))
    first, second = body(doc + " question 1?"), body(doc + " question 2?")
    want = colocated_reference(args.kvferry, [first, second])
    status, resp, hdr = px.complete(first)
    check(status == 200 and resp["choices"][0]["text"] == want[(doc + " question 1?", 6)],
          f"first: {status} {resp}")
    home = hdr.get("X-Kvferry-Prefill")
    p = ps[int(home[1:])]
    check(wait_until(lambda: p.metric("kvferry:kv_offload_files") >= 10, 10) is not None,
          f"{home} wrote no block files")
    p.stop()
    p = ps[int(home[1:])] = start_p(int(home[1:]))
    check(wait_until(lambda: following(home, 10), 20) is not None,
          f"the restarted {home}'s disk blocks never reached the index")
    check(p.metric("kvferry:prefix_cache_hit_tokens_total") == 0, "a fresh process has hits")
    status, resp, hdr = px.complete(second)
    check(status == 200 and resp["choices"][0]["text"] == want[(doc + " question 2?", 6)],
          f"second: {status} {resp}")
    assert_pulled(resp, "second")
    check(hdr.get("X-Kvferry-Prefill") == home, f"routed to {hdr.get('X-Kvferry-Prefill')}, "
          f"not to {home}, whose disk holds the document")
    hits = p.metric("kvferry:kv_offload_hit_tokens_total")
    check(hits >= 160, f"{home} read {hits} prompt tokens from disk, want >= 160")


def case_prefix_pull_between_prefills():
    """--prefix-pull-min-tokens: a P (kv_role kv_both, registered prefill) given a document the
    other P holds pulls the document's blocks from it instead of computing them. Round-robin
    sends the document's second question to the other P; the proxy leases the blocks from the
    first. Answers equal colocated; D's KV pulled; every lease ends (pools clean)."""
    etcd = Etcd()
    reg = etcd.registry()
    ps = [serve(args.kvferry, f"p{i}", "kv_both", reg, args=EVENTS + ("--cluster-role", "prefill"))
          for i in range(2)]
    d = serve(args.kvferry, "d0", "kv_consumer", reg, args=EVENTS)
    px = proxy(args.kvferry, "proxy", reg,
               args=("--routing", "round-robin", "--prefix-pull-min-tokens", "32"))
    check(wait_until(lambda: len(px.members("healthy")) == 3 and all(
        f'kvferry:proxy_kv_index_blocks{{member="{m}"}}' in px.metrics() for m in ("p0", "p1")),
        20) is not None, "members, or the proxy does not follow their events")
    doc = "".join(chr(ord("a") + (i * 17) % 26) for i in range(160))
    first, second = body(doc + " question 1?"), body(doc + " question 2?", logprobs=1)
    want = colocated_reference(args.kvferry, [first, second])
    ref = Kvferry(args.kvferry, "colocated_logprobs", "serve", ["--threads", "1"])
    _, want_second, _ = ref.complete(second)
    ref.stop()
    status, resp, hdr = px.complete(first)
    check(status == 200 and resp["choices"][0]["text"] == want[(first["prompt"], 6)],
          f"first: {status} {resp}")
    home = hdr.get("X-Kvferry-Prefill")
    check(wait_until(lambda: px.metric(f'kvferry:proxy_kv_index_blocks{{member="{home}"}}') >= 10,
                     10) is not None, f"{home}'s blocks never reached the index")
    status, resp, hdr = px.complete(second)
    check(status == 200 and resp["choices"][0]["text"] == want[(second["prompt"], 6)],
          f"second: {status} {resp}")
    check(resp["choices"][0]["logprobs"]["token_logprobs"] ==
          want_second["choices"][0]["logprobs"]["token_logprobs"],
          "logprobs differ from colocated")
    assert_pulled(resp, "second (D from P)")
    other = hdr.get("X-Kvferry-Prefill")
    check(other != home, f"round-robin sent both to {home}")
    check(hdr.get("X-Kvferry-Prefix-Source") == home,
          f"{other} was not given {home}'s prefix: {hdr.get('X-Kvferry-Prefix-Source')}")
    check(px.metric('kvferry:proxy_prefix_pulls_total{outcome="pulled"}') == 1,
          "P's pull of the prefix did not happen")
    p_other = ps[int(other[1:])]
    pulled = p_other.metric("kvferry:kv_transfer_tokens_total")
    check(pulled >= 160, f"{other} pulled {pulled} tokens of the document, want >= 160")
    for m in ps + [d]:
        check(wait_until(lambda: m.blocks_in_use() == 0, 15) is not None, f"{m.name} holds blocks")


def case_conditional_disaggregation():
    """--disagg-min-uncached-tokens: a short prompt, and a long one whose D already holds all but
    a few of its tokens, go to a D alone; a long new prompt goes P then D. Answers equal
    colocated either way."""
    etcd = Etcd()
    reg = etcd.registry()
    p = serve(args.kvferry, "p0", "kv_producer", reg, args=EVENTS)
    d = serve(args.kvferry, "d0", "kv_consumer", reg, args=EVENTS)
    px = proxy(args.kvferry, "proxy", reg, args=("--disagg-min-uncached-tokens", "40"))
    check(wait_until(lambda: len(px.members("healthy")) == 2, 20) is not None, "members")
    check(wait_until(lambda: all(f'kvferry:proxy_kv_index_blocks{{member="{m}"}}' in px.metrics()
                                 for m in ("p0", "d0")), 20) is not None, "not following events")
    doc = "".join(chr(ord("a") + (i * 5) % 26) for i in range(160))
    short, long_a, long_b = body("a short one"), body(doc + " question 1?"), body(doc + " q 2?")
    want = colocated_reference(args.kvferry, [short, long_a, long_b])

    def ask(b, what):
        status, resp, hdr = px.complete(b)
        check(status == 200, f"{what}: {status} {resp}")
        check(resp["choices"][0]["text"] == want[(b["prompt"], b["max_tokens"])],
              f"{what}: text differs")
        return resp, hdr

    p_before = p.metric('kvferry:request_success_total{finished_reason="length"}')
    _, hdr = ask(short, "short")
    check("X-Kvferry-Prefill" not in hdr and hdr.get("X-Kvferry-Decode") == "d0",
          f"a 12-token prompt went through a P: {hdr}")
    resp, hdr = ask(long_a, "long")
    check(hdr.get("X-Kvferry-Prefill") == "p0", f"a 173-token prompt skipped P: {hdr}")
    assert_pulled(resp, "long")
    check(wait_until(lambda: px.metric('kvferry:proxy_kv_index_blocks{member="d0"}') >= 10, 10)
          is not None, "d0's pulled blocks never reached the index")
    resp, hdr = ask(long_b, "long, its document on d0")
    check("X-Kvferry-Prefill" not in hdr, f"13 uncached tokens went through a P: {hdr}")
    check(resp["usage"]["prompt_tokens_details"]["cached_tokens"] >= 160,
          f"d0 recomputed the document: {resp['usage']}")
    check(px.metric("kvferry:proxy_decode_only_total") == 2, "decode-only requests not counted")
    check(p.metric('kvferry:request_success_total{finished_reason="length"}') == p_before + 1,
          "P served a decode-only request")
    for m in (p, d):
        check(wait_until(lambda: m.blocks_in_use() == 0, 10) is not None, f"{m.name} holds blocks")


def case_two_proxies_side_by_side():
    etcd = Etcd()
    reg = etcd.registry()
    members = [serve(args.kvferry, n, r, reg) for n, r in
               (("p0", "kv_producer"), ("p1", "kv_producer"), ("d0", "kv_consumer"),
                ("d1", "kv_consumer"))]
    proxies = [proxy(args.kvferry, f"proxy{i}", reg) for i in range(2)]
    for px in proxies:
        check(wait_until(lambda: len(px.members("healthy")) == 4, 20) is not None, "members")
    prompts = [body(f"side by side {i} " + "y" * (10 * i), n=5) for i in range(12)]
    want = colocated_reference(args.kvferry, prompts)
    for i, b in enumerate(prompts):
        px = proxies[i % 2]
        status, resp, hdr = px.complete(b)
        check(status == 200, f"{px.name}: {status} {resp}")
        check(resp["choices"][0]["text"] == want[(b["prompt"], b["max_tokens"])], "text differs")
        assert_pulled(resp, px.name)
    for m in members:
        check(m.metric('kvferry:request_success_total{finished_reason="length"}') > 0,
              f"{m.name} got no request")
        check(wait_until(lambda: m.blocks_in_use() == 0, 10) is not None, f"{m.name} holds blocks")


if __name__ == "__main__":
    args = parse_args()
    run([("members_join_and_leave", case_members_join_and_leave),
         ("prefix_affinity", case_prefix_affinity),
         ("kv_routing", case_kv_routing),
         ("conditional_disaggregation", case_conditional_disaggregation),
         ("disk_tier_survives_a_restart", case_disk_tier_survives_a_restart),
         ("prefix_pull_between_prefills", case_prefix_pull_between_prefills),
         ("registry_goes_away_and_comes_back", case_registry_goes_away_and_comes_back),
         ("bad_registry_data_is_ignored", case_bad_registry_data_is_ignored),
         ("two_proxies_side_by_side", case_two_proxies_side_by_side)])
