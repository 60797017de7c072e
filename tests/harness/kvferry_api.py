"""The shapes of kvferry's requests and answers the tests build and read: --kv-transfer-config,
the prefill and decode legs of a hand-off (what the proxy sends, proxy/handoff.h), completion
texts (plain and streamed), OpenAI error bodies."""
import json

# Keys of --kv-transfer-config that sit beside kv_connector_extra_config, not inside it.
_TOP_LEVEL = ("kv_load_failure_policy", "kv_buffer_device")


def kv_config(engine_id, role="kv_both", **extra):
    """A --kv-transfer-config JSON string for the FerryConnector; `extra` goes to
    kv_connector_extra_config, except kv_load_failure_policy and kv_buffer_device."""
    top = {"kv_connector": "FerryConnector", "kv_role": role, "engine_id": engine_id}
    for k in _TOP_LEVEL:
        if k in extra:
            top[k] = extra.pop(k)
    top["kv_connector_extra_config"] = extra
    return json.dumps(top)


def prefill_body(body):
    """What the proxy sends P (proxy/handoff.h)."""
    b = dict(body)
    b["max_tokens"] = 1
    b["stream"] = False
    b["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False,
                               "remote_engine_id": None, "remote_block_ids": None,
                               "remote_host": None, "remote_port": None}
    return b


def decode_body(body, params):
    """What the proxy sends D: the client's body and P's kv_transfer_params."""
    b = dict(body)
    b["kv_transfer_params"] = params
    return b


def text_of(resp):
    return resp["choices"][0]["text"] if isinstance(resp, dict) and "choices" in resp else None


def sse_text(raw):
    """(text, error or None) of a completions stream."""
    text, error = "", None
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            error = ev["error"]
        elif ev.get("choices"):
            text += ev["choices"][0].get("text", "")
    return text, error


def is_openai_error(resp, code=None):
    if not isinstance(resp, dict) or not isinstance(resp.get("error"), dict):
        return False
    e = resp["error"]
    ok = isinstance(e.get("message"), str) and e["message"] != "" and "type" in e
    return ok and (code is None or e.get("code") == code)
