"""The API client of the commands that talk to a cluster: ``--kubeconfig``, else the files ``$KUBECONFIG`` names
(or ``~/.kube/config``), else the pod's service account, as kubectl chooses.

A kubeconfig that cannot be used is bad input (exit 2), said in one line that names the file and what is wrong with
it: not a file, unreadable, not UTF-8, not YAML (line and column), not a mapping, a current-context no context
has, a context whose cluster is missing or has no server. The client library's own checks come after these, and its
message is passed on without the exception's class. A kubeconfig found by default that is broken is reported, not
passed over for the service account: the user meant it.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from lyra.apiserver_requests import bound_each_request, no_read_retries
from lyra.text_files import TextFileError, decode_utf8, read_at_most

if TYPE_CHECKING:
    from kubernetes import client

#: A kubeconfig larger than this is not one (the largest real ones, with many embedded certificates, are a few
#: hundred KiB); reading on would only spend time and memory.
MAX_KUBECONFIG_BYTES = 16 * 1024 * 1024


class KubeconfigError(Exception):
    """No usable kubeconfig; the message says which file and why (bad input: exit 2)."""


#: How long a one-shot command (``lyra status``, ``lyra check``, ``lyra plan --from-cluster``, ``lyra nodes
#: restore``, ``lyra emulate``) waits on the API server: to connect, then for each read of an answer. Without it a
#: server that accepts and never answers (a hung API server, a stale port-forward) held ``lyra check`` for ever and
#: ``lyra status`` for 8 minutes (four tries of the list's 120 s, which suits the operator's caches). A list page of
#: 500 objects starts to arrive within a second on a healthy server.
ONE_SHOT_TIMEOUT_S: tuple[float, float] = (10.0, 30.0)


def api_client(kubeconfig: Path | None, *, one_shot: bool = False) -> client.ApiClient:
    """A client for the cluster ``kubeconfig`` (else the default kubeconfig, else the service account) points to. A
    request that timed out while reading is not sent again (a connection refused still is, as before): the caller
    decides (the watch caches retry with their backoff). ``one_shot``: each request waits at most
    :data:`ONE_SHOT_TIMEOUT_S`."""
    made = _api_client(kubeconfig)
    if one_shot:
        bound_each_request(made, ONE_SHOT_TIMEOUT_S)
    else:
        no_read_retries(made)
    return made


def _api_client(kubeconfig: Path | None) -> client.ApiClient:
    from kubernetes import client, config

    # A kubeconfig may skip TLS verification on purpose (kubectl says nothing either); urllib3 would otherwise print
    # a warning with a source line on every request. And each retry of a failed connection would be logged with its
    # connection pool and retry counts before the caller says, once, why the call failed (lyra.apiserver_failures).
    from urllib3.exceptions import InsecureRequestWarning

    warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    if kubeconfig is not None:
        files = [(f"--kubeconfig {kubeconfig}", kubeconfig)]
    else:
        # os.path's expanduser leaves "~" as it is where no home is known (a container's arbitrary uid); Path's raises.
        files = default_kubeconfigs(os.environ.get("KUBECONFIG"), Path(os.path.expanduser("~/.kube/config")))
    if not files:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except Exception as error:  # not in a pod, or its service account files are missing
            raise KubeconfigError(
                "no kubeconfig: --kubeconfig not given, none at $KUBECONFIG or ~/.kube/config, and not in a pod with "
                f"a service account ({_first_line(error)})"
            ) from None
        return client.ApiClient()
    for source, path in files:
        check_kubeconfig(source, path, alone=len(files) == 1)
    source = files[0][0] if len(files) == 1 else "$KUBECONFIG"
    paths = [path for _, path in files]
    if len(paths) > 1:  # kubectl passes over an empty file among several; the client library refuses it
        paths = [path for path in paths if yaml.safe_load(path.read_bytes()) is not None]
        if not paths:
            raise KubeconfigError("$KUBECONFIG: every file it names is empty")
    # The files checked, named to the client library (which merges several): it reads $KUBECONFIG only once, when it
    # is first imported.
    merged = os.pathsep.join(str(path) for path in paths)
    try:
        made: client.ApiClient = config.new_client_from_config(config_file=merged)  # type: ignore[no-untyped-call]
    except Exception as error:  # a kubeconfig can be broken in ways only the client library checks (credentials)
        raise KubeconfigError(f"{source}: not a usable kubeconfig: {_first_line(error)}") from None
    return made


def default_kubeconfigs(variable: str | None, home_config: Path) -> list[tuple[str, Path]]:
    """The kubeconfig files used when none is given, each with how to name it: the existing files among those
    ``$KUBECONFIG`` lists (separated as ``PATH`` is; the client library merges them), else ``~/.kube/config`` if it
    exists."""
    if variable:
        named = [Path(os.path.expanduser(entry)) for entry in variable.split(os.pathsep) if entry]
        return [(f"$KUBECONFIG file {path}", path) for path in named if path.exists()]
    return [("~/.kube/config", home_config)] if home_config.exists() else []


def check_kubeconfig(source: str, path: Path, *, alone: bool = True) -> None:
    """Raise :class:`KubeconfigError` naming ``source`` when ``path`` is plainly not a kubeconfig (``alone``: see
    :func:`kubeconfig_problem`)."""
    if not path.exists():
        raise KubeconfigError(f"{source}: no such file")
    if not path.is_file():
        raise KubeconfigError(f"{source}: not a regular file")
    try:
        raw = read_at_most(path, MAX_KUBECONFIG_BYTES)
    except OSError as error:
        raise KubeconfigError(f"{source}: cannot read it ({error.strerror or error})") from None
    if raw is None:
        raise KubeconfigError(f"{source}: larger than {MAX_KUBECONFIG_BYTES // (1024 * 1024)} MiB, not a kubeconfig")
    problem = kubeconfig_problem(raw, alone=alone)
    if problem is not None:
        raise KubeconfigError(f"{source}: {problem}")


def kubeconfig_problem(raw: bytes, *, alone: bool = True) -> str | None:
    """What makes ``raw`` plainly not a kubeconfig (``None`` if nothing does): the checks kubectl's users know from
    its messages, before the client library's. A file merged with others (``alone`` false: ``$KUBECONFIG`` names
    several) may be empty and may hold only part of what its current context needs: only its own shape is checked,
    and the client library checks the merge."""
    try:
        text = decode_utf8(raw)
    except TextFileError as error:
        return str(error)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return f"not valid YAML ({where}{getattr(error, 'problem', None) or 'cannot parse it'})"
    if document is None and not alone:
        return None
    if not isinstance(document, Mapping):
        return f"not a kubeconfig: expected a mapping with clusters, contexts and users, got {_kind(document)}"
    entries: dict[str, dict[str, Any]] = {}
    for key in ("clusters", "contexts", "users"):
        listed = document.get(key)
        if listed is None:
            listed = []
        if not isinstance(listed, list):
            return f"{key}: expected a list, got {_kind(listed)}"
        named: dict[str, Any] = {}
        for index, entry in enumerate(listed):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                return f"{key}[{index}]: expected a mapping with a name"
            named[entry["name"]] = entry
        entries[key] = named
    if not alone:
        return None
    current = document.get("current-context")
    if not current:
        return "no current-context"
    if not isinstance(current, str) or current not in entries["contexts"]:
        known = ", ".join(sorted(entries["contexts"])) or "none"
        return f"current-context {str(current)[:100]!r} is not among its contexts ({known[:200]})"
    context = entries["contexts"][current].get("context")
    if not isinstance(context, Mapping):
        return f"context {current!r}: expected a mapping under 'context'"
    cluster_name = context.get("cluster")
    if not isinstance(cluster_name, str) or cluster_name not in entries["clusters"]:
        return f"context {current!r}: its cluster {str(cluster_name)[:100]!r} is not among the clusters"
    cluster = entries["clusters"][cluster_name].get("cluster")
    if not isinstance(cluster, Mapping) or not isinstance(cluster.get("server"), str) or not cluster["server"]:
        return f"cluster {cluster_name!r}: no server"
    return None


def _kind(value: object) -> str:
    """A YAML value's kind, as a user would name it."""
    if value is None:
        return "an empty document"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _first_line(error: BaseException) -> str:
    """An error's message, first line only and at most 300 characters."""
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__
