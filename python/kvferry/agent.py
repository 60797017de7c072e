"""kvferry.Agent: the transfer agent, one per process (or per tensor-parallel rank).

    import kvferry
    with kvferry.Agent("decode-0") as agent:          # UCX; backend="socket" for kvferry's TCP
        buf = bytearray(4096)
        region = agent.register_memory(buf)           # or a CPU torch tensor, or ptr=, size=
        blob = agent.get_local_metadata()             # send to the peer out of band
        peer = agent.load_remote_metadata(peer_blob)  # the peer's blob
        xfer = agent.prepare_transfer(kvferry.XferOp.READ, peer,
                                      local=[(region, 0, 4096)], remote=[(peer_region, 0, 4096)],
                                      notification=b"req-17")
        xfer.post()
        xfer.wait(timeout_ms=5000)                    # or: while xfer.poll() is not DONE
        xfer.release()

A descriptor is ``(region, offset, length)``: a :class:`Region` (or its id) of this agent on the
local side, the peer's region id (the ``Region.id`` the peer registered) on the remote side.
Every failure raises a :class:`kvferry.KvferryError` subclass carrying the status code; every wait
has a deadline (the transfer's ``timeout_ms``, or the ``timeout_ms`` given to the wait).

Thread-safety: methods may be called from any thread; one Transfer is driven by one thread at a
time. Waits release the GIL.
"""

from dataclasses import dataclass

from kvferry import _kvferry
from kvferry._kvferry import XferInfo, XferOp, XferState


@dataclass(frozen=True)
class Region:
    """A registered memory region of this agent. ``id`` is what peers name it by."""
    id: int
    length: int


@dataclass(frozen=True)
class Peer:
    """A peer whose metadata this agent loaded. Local to this agent."""
    id: int
    name: str


@dataclass(frozen=True)
class Notification:
    """A message from a peer (sent on its own, or after a transfer's bytes landed)."""
    peer_name: str
    message: bytes


def _region_id(region):
    return region.id if isinstance(region, Region) else int(region)


def _descriptors(items):
    return [(_region_id(r), int(off), int(n)) for r, off, n in items]


class Transfer:
    """A prepared transfer: post it, poll or wait, post again or release it."""

    def __init__(self, agent, handle):
        self._agent = agent
        self._handle = handle

    @property
    def info(self) -> XferInfo:
        """Total bytes, descriptor counts before and after merging, whether it is a memcpy."""
        return self._agent._core.info(self._handle)

    def post(self) -> None:
        """Starts the transfer; its deadline is now + the transfer's timeout_ms."""
        self._agent._core.post(self._handle)

    def poll(self) -> XferState:
        """IN_PROGRESS or DONE; raises the transfer's failure. Does not block."""
        return self._agent._core.poll(self._handle)

    def wait(self, timeout_ms: int = 10_000) -> None:
        """Blocks until done (returns), failed (raises), or timeout_ms (DeadlineExceededError)."""
        self._agent._core.wait(self._handle, int(timeout_ms))

    def release(self) -> None:
        """Forgets the transfer, cancelling it if still in flight."""
        self._agent._core.release(self._handle)


class Agent:
    """A kvferry transfer agent. ``backend``: "ucx" (shared memory on this host, TCP across
    hosts), "socket" (kvferry's own TCP data path; ``listen_host``/``listen_port`` say where
    peers connect) or "loopback" (agents of one process, for tests). ``ucx_transport``: "auto",
    "tcp" or "shm". Peers must use the same backend."""

    def __init__(self, name: str, backend: str = "ucx", *, ucx_transport: str = "auto",
                 listen_host: str = "127.0.0.1", listen_port: int = 0):
        self._core = _kvferry._Agent(name, backend, ucx_transport, listen_host, int(listen_port))

    @property
    def name(self) -> str:
        return self._core.name

    def register_memory(self, obj=None, *, ptr: int | None = None,
                        size: int | None = None) -> Region:
        """Registers memory for transfers: a writable C-contiguous buffer (bytearray,
        memoryview, numpy array, mmap), a contiguous CPU torch tensor, or ``ptr=`` + ``size=``
        (the caller keeps that memory valid). The agent keeps ``obj`` alive until
        deregister_memory or close. Register before get_local_metadata: peers see only the
        regions in the metadata they loaded."""
        if obj is not None:
            if ptr is not None or size is not None:
                raise TypeError("register_memory: give an object or ptr= and size=, not both")
            return Region(*self._core.register_object(obj))
        if ptr is None or size is None:
            raise TypeError("register_memory: give an object, or both ptr= and size=")
        return Region(*self._core.register_pointer(int(ptr), int(size)))

    def deregister_memory(self, region: Region | int) -> None:
        """Forgets a region; transfers naming it fail from then on (NotFoundError)."""
        self._core.deregister(_region_id(region))

    def get_local_metadata(self) -> bytes:
        """Opaque bytes for peers: name, connection info, the registered regions."""
        return self._core.local_metadata()

    def load_remote_metadata(self, blob: bytes) -> Peer:
        """Connects to the peer described by ``blob`` (InvalidArgumentError on garbage)."""
        peer_id = self._core.load_remote_metadata(bytes(blob))
        return Peer(peer_id, self._core.peer_name(peer_id))

    def remove_peer(self, peer: Peer) -> None:
        """Forgets a peer; its in-flight transfers fail with AbortedError."""
        self._core.remove_peer(peer.id)

    def prepare_transfer(self, op: XferOp, peer: Peer, local, remote, *,
                         notification: bytes = b"", timeout_ms: int = 10_000) -> Transfer:
        """Validates and plans a transfer of ``local[i]`` <-> ``remote[i]``; nothing is sent.
        READ copies the peer's bytes into local memory, WRITE the other way. ``notification``
        reaches the peer once every byte is there; ``timeout_ms`` bounds each post."""
        handle = self._core.prepare(op, peer.id, _descriptors(local), _descriptors(remote),
                                    bytes(notification), int(timeout_ms))
        return Transfer(self, handle)

    def send_notification(self, peer: Peer, message: bytes) -> None:
        """Sends ``message`` to the peer on its own."""
        self._core.send_notification(peer.id, bytes(message))

    def get_notifications(self) -> list[Notification]:
        """The notifications received so far (drained), in arrival order per peer."""
        return [Notification(p, m) for p, m in self._core.notifications()]

    def wait_notifications(self, timeout_ms: int) -> list[Notification]:
        """Blocks until at least one notification arrived or timeout_ms passed (then [])."""
        return [Notification(p, m) for p, m in self._core.wait_notifications(int(timeout_ms))]

    def stats(self) -> dict:
        """Counters since creation: ``{"refused_inbound": {reason: count}}``, what the backend
        refused from peers (socket backend: every reason, zeros included; others: empty)."""
        return self._core.stats()

    def close(self) -> None:
        """Stops the agent: peers closed, transfers cancelled, memory deregistered and let go."""
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Agent", "Notification", "Peer", "Region", "Transfer", "XferInfo", "XferOp",
           "XferState"]
