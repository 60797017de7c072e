"""P's side channel: a small TCP endpoint on remote_port that hands D what it needs to read P's
KV cache (P's kvferry agent metadata and KvLayout), and D's client for it.

Wire format, version 1: P accepts, writes one UTF-8 JSON object terminated by "\\n", closes.
    {"protocol": "kvferry-vllm-handshake", "version": 1, "engine_id": str, "tp_rank": int,
     "region_id": int, "agent_metadata": base64 str, "layout": KvLayout.to_dict()}
D refuses anything else (a peer that is not kvferry, another version, a layout that differs in
a MUST_MATCH field) with HandshakeError; the connector turns that into a load failure, so vLLM
recomputes the prompt.

Thread-safety: SideChannelServer serves from its own thread the bytes it was built with;
fetch_handshake may be called from any thread.
"""

import base64
import json
import socket
import threading
from dataclasses import dataclass

from kvferry.vllm.layout import KvLayout, mismatches

PROTOCOL = "kvferry-vllm-handshake"
VERSION = 1
_MAX_BYTES = 16 << 20


class HandshakeError(RuntimeError):
    """D could not use P: unreachable, not kvferry, another version, or an incompatible KV."""


@dataclass(frozen=True)
class PeerInfo:
    engine_id: str
    tp_rank: int
    region_id: int
    agent_metadata: bytes
    layout: KvLayout


def encode(info: PeerInfo) -> bytes:
    return (json.dumps({
        "protocol": PROTOCOL, "version": VERSION, "engine_id": info.engine_id,
        "tp_rank": info.tp_rank, "region_id": info.region_id,
        "agent_metadata": base64.b64encode(info.agent_metadata).decode(),
        "layout": info.layout.to_dict()}) + "\n").encode()


def decode(blob: bytes) -> PeerInfo:
    try:
        d = json.loads(blob.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HandshakeError(f"peer is not a kvferry side channel (not JSON: {e})") from None
    if not isinstance(d, dict) or d.get("protocol") != PROTOCOL:
        raise HandshakeError("peer is not a kvferry side channel (no protocol "
                             f"{PROTOCOL!r})")
    if d.get("version") != VERSION:
        raise HandshakeError(f"peer speaks handshake version {d.get('version')!r}, "
                             f"this kvferry speaks {VERSION}")
    try:
        return PeerInfo(str(d["engine_id"]), int(d["tp_rank"]), int(d["region_id"]),
                        base64.b64decode(d["agent_metadata"]), KvLayout.from_dict(d["layout"]))
    except (KeyError, TypeError, ValueError) as e:
        raise HandshakeError(f"malformed kvferry handshake: {e!r}") from None


def fetch_handshake(host: str, port: int, timeout_ms: int) -> PeerInfo:
    """Connects to P's side channel and reads its PeerInfo, all within timeout_ms."""
    try:
        with socket.create_connection((host, port), timeout=timeout_ms / 1000) as s:
            chunks, size = [], 0
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > _MAX_BYTES:
                    raise HandshakeError(f"handshake from {host}:{port} over {_MAX_BYTES} bytes")
    except OSError as e:
        raise HandshakeError(f"side channel {host}:{port}: {e}") from None
    return decode(b"".join(chunks))


def check_compatible(local: KvLayout, remote: PeerInfo) -> None:
    """Raises HandshakeError naming every field that differs."""
    diff = mismatches(local, remote.layout)
    if diff:
        raise HandshakeError("P and D KV caches differ: " + "; ".join(diff))


class SideChannelServer:
    """Serves ``encode(info)`` to every connection on (host, port) until close()."""

    def __init__(self, host: str, port: int, info: PeerInfo):
        self._blob = encode(info)
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._sock.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kvferry-side-channel",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(5)
                    conn.sendall(self._blob)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
