"""`lyra extender`: the scheduler extender that kube-scheduler calls to score nodes for GPU pods.

It serves ``prioritize`` and ``preempt`` (it refuses no node: Lyra's hard rules are the state taints and the pods'
node affinity, which kube-scheduler checks itself) over HTTP, or HTTPS with ``--tls-cert-file`` and
``--tls-key-file`` (and, with ``--client-ca-file``, only to clients presenting a certificate that CA signed, as
kube-scheduler does with its extender ``tlsConfig``), on ``--host``:``--port`` (by default loopback, where the local
cluster's kube-scheduler calls it, :func:`lyra.settings.local_extender_url`; the chart serves HTTPS on every
interface), with ``/healthz``, ``/readyz`` (ready once its node and pod cache has synced) and ``/metrics``. Memory
and time per client are bounded: ``--max-body-mib`` per request, ``--max-held-mib`` across requests (503 past it),
``--client-timeout`` for a request's headers and again its body. The kubeconfig comes from ``--kubeconfig``,
``$KUBECONFIG``, ``~/.kube/config`` or, inside a pod, the service account. Exit codes: 0 stopped cleanly, 1 it could
not start, 2 bad input.
"""

from __future__ import annotations

import argparse
import logging
import ssl
import sys
from pathlib import Path
from typing import Any

from lyra.cli.arguments import add_settings
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.settings import ExtenderSettings


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register `lyra extender`."""
    parser = commands.add_parser(
        "extender",
        help="run the scheduler extender (prioritize, preempt) for kube-scheduler",
        description="Serve kube-scheduler's extender protocol from a watched cache of nodes and pods: score nodes "
        "so inference packs onto serving servers, jobs pack onto few servers away from the next reclaim, and "
        "preemption never takes inference or base workers for lesser pods.",
    )
    add_settings(parser, ExtenderSettings)
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument(
        "--capture-dir",
        type=Path,
        metavar="DIR",
        help="write the first 50 request bodies of each verb to DIR as JSON (for debugging and test fixtures)",
    )
    parser.add_argument(
        "--preempt-across-namespaces",
        action="store_true",
        help="let a pod's preemption evict Lyra's pods in other namespaces (default: only in its own namespace)",
    )
    parser.add_argument("--tls-cert-file", type=Path, metavar="PEM", help="serve HTTPS with this certificate (chain)")
    parser.add_argument("--tls-key-file", type=Path, metavar="PEM", help="the private key of --tls-cert-file")
    parser.add_argument(
        "--client-ca-file",
        type=Path,
        metavar="PEM",
        help="with TLS: accept only clients presenting a certificate signed by this CA (kube-scheduler's tlsConfig)",
    )
    parser.set_defaults(prog=parser.prog, run=run_extender)


def _bad(message: str) -> int:
    print(f"lyra extender: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _tls_problem(cert: Path | None, key: Path | None, client_ca: Path | None) -> str | None:
    """Why the TLS flags cannot serve, or ``None``: checked by loading them, before any port is bound."""
    if (cert is None) != (key is None):
        return "--tls-cert-file and --tls-key-file go together"
    if cert is None or key is None:
        return "--client-ca-file needs --tls-cert-file and --tls-key-file" if client_ca is not None else None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        return f"--tls-cert-file {cert} / --tls-key-file {key}: cannot be used: {error}"
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as error:
            return f"--client-ca-file {client_ca}: cannot be used: {error}"
    return None


def run_extender(args: argparse.Namespace) -> int:
    if not 1 <= args.max_body_mib <= 1024:
        return _bad(f"--max-body-mib must be between 1 and 1024, got {args.max_body_mib}")
    if not args.max_body_mib <= args.max_held_mib <= 4096:
        return _bad(
            f"--max-held-mib must be between --max-body-mib ({args.max_body_mib}) and 4096, got {args.max_held_mib}"
        )
    if not 1 <= args.client_timeout_s <= 300:
        return _bad(f"--client-timeout must be between 1 and 300 seconds, got {args.client_timeout_s:g}")
    tls_problem = _tls_problem(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    if tls_problem is not None:
        return _bad(tls_problem)

    from lyra.cli.kube_client import KubeconfigError, api_client
    from lyra.extender.app import MIB, BodyRecorder, create_app
    from lyra.extender.serving import serve, server_config
    from lyra.extender.watch import WatchedView
    from lyra.listening import ListenError, bound_sockets

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        api = api_client(args.kubeconfig)
    except KubeconfigError as error:
        return _bad(str(error))
    try:
        recorder = BodyRecorder(args.capture_dir) if args.capture_dir is not None else None
    except OSError as error:
        return _bad(f"--capture-dir {args.capture_dir}: {error}")
    try:  # before the watch: a port in use or an address not this host's is said first, in one line
        sockets = bound_sockets(args.host, args.port)
    except ListenError as error:
        print(f"lyra extender: {error}", file=sys.stderr)
        return EXIT_FAILED
    source = WatchedView(api)
    source.start()
    app = create_app(
        source,
        max_body_bytes=args.max_body_mib * MIB,
        max_held_bytes=args.max_held_mib * MIB,
        body_timeout_s=args.client_timeout_s,
        recorder=recorder,
        preempt_across_namespaces=args.preempt_across_namespaces,
    )
    try:
        config = server_config(
            app,
            host=args.host,
            port=args.port,
            client_timeout_s=args.client_timeout_s,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
            client_ca_file=args.client_ca_file,
        )
        serve(config, sockets)
    finally:
        source.stop()
        for sock in sockets:
            sock.close()
    return EXIT_OK
