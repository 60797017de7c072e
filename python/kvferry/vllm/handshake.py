"""P's side channel: a small TCP endpoint on remote_port that hands D what it needs to read P's
KV cache and its lease generations (P's kvferry agent metadata, the regions, and KvLayout); and
D's client for it.

Wire format, version 3: D connects and writes one JSON request line; P answers one JSON line
(UTF-8, terminated by "\\n") and closes.
    D: {"protocol": "kvferry-vllm-handshake", "version": 3, "op": "handshake"}
    P: {"protocol": ..., "version": 3, "engine_id": str, "tp_rank": int, "region_id": int,
        "generations_region_id": int,
        "agent_metadata": base64 str, "layout": KvLayout.to_dict()}
D refuses anything else (a peer that is not kvferry, another version, a layout that differs in
a MUST_MATCH field) with HandshakeError; the connector turns that into a load failure, so vLLM
recomputes the prompt. Nothing about a lease crosses this channel: D reads P's generations
itself, one-sided, after its data (worker.py).

Thread-safety: SideChannelServer serves from its own threads the bytes it was built with; the
client function may be called from any thread.
"""

import base64
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kvferry.vllm.layout import KvLayout, mismatches

PROTOCOL = "kvferry-vllm-handshake"
VERSION = 3
_MAX_BYTES = 16 << 20
_MAX_REQUEST_BYTES = 4096
_WORKERS = 16               # P: connections answered at once
_REQUEST_DEADLINE_S = 5.0   # P: a connection's whole request line, from its accept


class HandshakeError(RuntimeError):
    """D could not use P: unreachable, not kvferry, another version, or an incompatible KV."""


@dataclass(frozen=True)
class PeerInfo:
    engine_id: str
    tp_rank: int
    region_id: int              # the KV cache
    generations_region_id: int  # P's lease generations: a little-endian uint64 per logical block
    agent_metadata: bytes
    layout: KvLayout


def encode(info: PeerInfo) -> bytes:
    return (json.dumps({
        "protocol": PROTOCOL, "version": VERSION, "engine_id": info.engine_id,
        "tp_rank": info.tp_rank, "region_id": info.region_id,
        "generations_region_id": info.generations_region_id,
        "agent_metadata": base64.b64encode(info.agent_metadata).decode(),
        "layout": info.layout.to_dict()}) + "\n").encode()


def _check_header(blob: bytes) -> dict:
    """The JSON object in blob, if it is kvferry's protocol at this version."""
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
    return d


def decode(blob: bytes) -> PeerInfo:
    d = _check_header(blob)
    try:
        return PeerInfo(str(d["engine_id"]), int(d["tp_rank"]), int(d["region_id"]),
                        int(d["generations_region_id"]),
                        base64.b64decode(d["agent_metadata"]), KvLayout.from_dict(d["layout"]))
    except (KeyError, TypeError, ValueError) as e:
        raise HandshakeError(f"malformed kvferry handshake: {e!r}") from None


def _request_line(op: str, **fields) -> bytes:
    return (json.dumps({"protocol": PROTOCOL, "version": VERSION, "op": op, **fields}) +
            "\n").encode()


def _exchange(host: str, port: int, request: bytes, timeout_ms: int) -> bytes:
    """Sends request, reads P's answer to EOF, all within timeout_ms."""
    try:
        with socket.create_connection((host, port), timeout=timeout_ms / 1000) as s:
            s.sendall(request)
            chunks, size = [], 0
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > _MAX_BYTES:
                    raise HandshakeError(f"answer from {host}:{port} over {_MAX_BYTES} bytes")
    except OSError as e:
        raise HandshakeError(f"side channel {host}:{port}: {e}") from None
    return b"".join(chunks)


def fetch_handshake(host: str, port: int, timeout_ms: int) -> PeerInfo:
    """Connects to P's side channel and reads its PeerInfo, all within timeout_ms."""
    return decode(_exchange(host, port, _request_line("handshake"), timeout_ms))


def check_compatible(local: KvLayout, remote: PeerInfo) -> None:
    """Raises HandshakeError naming every field that differs."""
    diff = mismatches(local, remote.layout)
    if diff:
        raise HandshakeError("P and D KV caches differ: " + "; ".join(diff))


class SideChannelServer:
    """Answers every connection on (host, port) until close(): a handshake request with
    ``encode(info)``.
    Connections are answered concurrently, up to _WORKERS at once (more wait for one), each
    within _REQUEST_DEADLINE_S of its accept for the whole request line: a client that connects
    and sends nothing, or trickles, holds one worker that long and no other D's answer."""

    def __init__(self, host: str, port: int, info: PeerInfo):
        self._blob = encode(info)
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._sock.settimeout(0.5)
        self._stop = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers=_WORKERS,
                                           thread_name_prefix="kvferry-side-channel")
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
            try:
                self._workers.submit(self._serve_one, conn, time.monotonic() +
                                     _REQUEST_DEADLINE_S)
            except RuntimeError:  # shut down meanwhile
                conn.close()
                return

    def _serve_one(self, conn: socket.socket, deadline: float) -> None:
        with conn:
            try:
                answer = self._answer(_read_line(conn, deadline))
                if answer is not None:
                    conn.settimeout(max(0.1, deadline - time.monotonic()))
                    conn.sendall(answer)
            except OSError:  # socket.timeout included: past the deadline
                pass

    def _answer(self, line: bytes | None) -> bytes | None:
        """The bytes for one request line; None (close without an answer) for anything that
        is not a request of this protocol and version."""
        try:
            d = json.loads(line.decode()) if line else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if (not isinstance(d, dict) or d.get("protocol") != PROTOCOL or
                d.get("version") != VERSION):
            return None
        if d.get("op") == "handshake":
            return self._blob
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
        self._workers.shutdown(wait=False, cancel_futures=True)


def _read_line(conn: socket.socket, deadline: float) -> bytes | None:
    """One request line (without its newline), or None past _MAX_REQUEST_BYTES or at EOF;
    socket.timeout once `deadline` (monotonic) has passed, however the bytes trickle in."""
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("request line not complete by its deadline")
        conn.settimeout(left)
        chunk = conn.recv(1024)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > _MAX_REQUEST_BYTES:
            return None
    return buf.split(b"\n", 1)[0]
