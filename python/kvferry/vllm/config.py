"""KvferryConnector's settings: ``kv_connector_extra_config`` parsed and checked.

Unknown keys are refused with an error naming the key (a misspelt ``lease_timout_s`` must not
silently fall back to the default), and so are values of the wrong type or range. Imports nothing
from vLLM, so it is testable without it.

Thread-safety: values.
"""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ConnectorConfig:
    """Every key ``kv_connector_extra_config`` may hold, with its default."""

    # Where P's worker serves its handshake (agent metadata and KV layout), and what P returns
    # as remote_host / remote_port. TP rank r listens on side_channel_port + r.
    # 0 = vLLM's kv_port (KVTransferConfig.kv_port, 14579 unless set).
    side_channel_host: str = "127.0.0.1"
    side_channel_port: int = 0
    # P frees a finished request's blocks when D's notification arrives, or after this long if
    # it never does (D died, the proxy never sent the request to D).
    lease_timeout_s: float = 60.0
    # D's deadline for one pull (post to last byte); past it the load fails and vLLM recomputes.
    load_timeout_ms: int = 10_000
    # D's deadline to connect to P's side channel and read the handshake.
    handshake_timeout_ms: int = 5_000
    # The transfer agent's backend and UCX transport (docs/python.md).
    backend: str = "ucx"
    ucx_transport: str = "auto"
    # P stages every computed chunk into a host buffer registered with the agent (its own
    # memory: a D on this host maps it), and D reads that instead of P's cache; D reads into
    # staging and copies into its cache. Off: the caches themselves are registered.
    host_buffer: bool = False
    # The side channel's access control, as kvferry's connector has it (docs/deploy.md,
    # "Side-channel keys"): a shared token (plaintext: loopback only), or CURVE key files.
    auth_token: str = ""
    curve_secret_key_file: str = ""
    curve_client_keys_file: str = ""
    curve_server_keys_file: str = ""


_BACKENDS = ("ucx", "socket")
_UCX_TRANSPORTS = ("auto", "tcp", "shm")


class ConfigError(ValueError):
    """A bad kv_connector_extra_config; the message names the key."""


def parse_config(extra: dict | None, kv_port: int) -> ConnectorConfig:
    """Checks ``extra`` (kv_connector_extra_config) and fills in defaults. ``kv_port`` is
    KVTransferConfig.kv_port, the side channel's port when side_channel_port is 0."""
    extra = dict(extra or {})
    known = {f.name: f for f in fields(ConnectorConfig)}
    unknown = sorted(k for k in extra if k not in known)
    if unknown:
        raise ConfigError(
            f"KvferryConnector: unknown kv_connector_extra_config key {unknown[0]!r} "
            f"(known keys: {', '.join(sorted(known))})")
    values = {}
    for name, value in extra.items():
        want = type(known[name].default)
        ok = isinstance(value, want) and (want is bool or not isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            raise ConfigError(f"KvferryConnector: kv_connector_extra_config key {name!r} must "
                              f"be {want.__name__}, got {type(value).__name__} {value!r}")
        values[name] = value
    cfg = ConnectorConfig(**values)
    if cfg.side_channel_port == 0:
        cfg = ConnectorConfig(**{**values, "side_channel_port": int(kv_port)})
    _check_range(cfg)
    return cfg


def _check_range(cfg: ConnectorConfig) -> None:
    def bad(name, why):
        raise ConfigError(f"KvferryConnector: kv_connector_extra_config key {name!r} {why}, "
                          f"got {getattr(cfg, name)!r}")
    if not 0 < cfg.side_channel_port < 65536:
        bad("side_channel_port", "must be a TCP port (1..65535)")
    if cfg.lease_timeout_s <= 0:
        bad("lease_timeout_s", "must be > 0")
    if cfg.load_timeout_ms <= 0:
        bad("load_timeout_ms", "must be > 0")
    if cfg.handshake_timeout_ms <= 0:
        bad("handshake_timeout_ms", "must be > 0")
    if cfg.backend not in _BACKENDS:
        bad("backend", f"must be one of {', '.join(_BACKENDS)}")
    if cfg.ucx_transport not in _UCX_TRANSPORTS:
        bad("ucx_transport", f"must be one of {', '.join(_UCX_TRANSPORTS)}")
    if not cfg.side_channel_host:
        bad("side_channel_host", "must not be empty")
