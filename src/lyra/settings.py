"""Settings spelled once: a field declares its default, its command-line flag, how the flag reads its value and the
sentence ``--help`` says of it (:func:`setting`); the CLI builds flags from these fields, and the chart's values and
the local cluster's configuration take their defaults from them. The settings of components that must not import
each other (the extender, the local cluster) live here, beside no adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

#: How a setting's flag reads its value: a duration in seconds, a whole number >= 0, one >= 1, a host to listen on (an
#: IP address or a host name), the name of a Kubernetes object or empty (a DNS subdomain), a TCP port, or on/off.
SECONDS: Final = "seconds"
COUNT: Final = "count"
POSITIVE_COUNT: Final = "positive count"
HOST: Final = "host"
OPTIONAL_OBJECT_NAME: Final = "optional object name"
PORT: Final = "port"
SWITCH: Final = "switch"

#: What the operator bounds per namespace unless the admin says otherwise (``lyra operator`` and the chart's values,
#: docs/security.md): the inference GPUs every namespace not named may claim (``--inference-gpu-cap '*=64'``: eight
#: servers of eight GPUs, the whole inference pool of the local cluster), and the highest ``spec.priority`` its
#: TrainingJobs are queued at (``--max-priority '*=0'``: tenants' jobs compete on their expected durations).
DEFAULT_INFERENCE_GPU_CAP: Final = 64
DEFAULT_MAX_PRIORITY: Final = 0
#: How long an idle inference server stays idle before the operator lends it (``lyra operator --lend-delay``), and
#: what ``lyra plan loans`` takes it to be unless told.
DEFAULT_LEND_DELAY_S: Final = 60.0


def setting(default: Any, *, flag: str, kind: str, help: str) -> Any:
    """A field with its default, its flag, how the flag is read (:data:`SECONDS`, :data:`COUNT`,
    :data:`POSITIVE_COUNT`, :data:`HOST`, :data:`OPTIONAL_OBJECT_NAME`, :data:`PORT`, :data:`SWITCH`) and what
    ``--help`` says of it (the default is added there)."""
    return field(default=default, metadata={"flag": flag, "kind": kind, "help": help})


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """Where ``lyra extender`` listens and what it accepts. The local cluster's kube-scheduler calls it at
    :func:`local_extender_url`; the chart's Service uses :attr:`port`."""

    host: str = setting(
        "127.0.0.1", flag="--host", kind=HOST, help="address to listen on (an IP address or a host name)"
    )
    port: int = setting(8888, flag="--port", kind=PORT, help="port of prioritize, preempt, /metrics and the probes")
    max_body_mib: int = setting(
        6,
        flag="--max-body-mib",
        kind=POSITIVE_COUNT,
        help="largest request body accepted, in MiB (at most 1024; the default fits 15,000 node names and a pod)",
    )
    max_held_mib: int = setting(
        12,
        flag="--max-held-mib",
        kind=POSITIVE_COUNT,
        help="request body bytes held at once across all requests, in MiB (at least --max-body-mib); past it, 503",
    )
    client_timeout_s: float = setting(
        10.0,
        flag="--client-timeout",
        kind=SECONDS,
        help="seconds a client has to send a request's headers, and again its body; slower clients are cut",
    )


def local_extender_url() -> str:
    """Where the local cluster's kube-scheduler calls an extender started with the default settings."""
    defaults = ExtenderSettings()
    return f"http://{defaults.host}:{defaults.port}"
