"""The extender's memory and event-loop time under hostile bodies, as ``lyra extender`` serves them.

``uv run python -m bench.extender_limits_bench [--max-body-mib N] [--max-held-mib N] CLIENTS:MIB ...`` starts the
extender (uvicorn with :func:`lyra.extender.serving.server_config`, the app with those limits, an empty view) in a
child process, sends CLIENTS concurrent ``prioritize`` bodies of MIB MiB each (a valid pod, then a ``pad`` list of
empty objects: the shape that costs ``json.loads`` most memory and time per byte, about 27 bytes of Python
objects per byte), and prints for each run the answers' statuses, the child's peak RSS (``VmHWM``, which only grows:
runs are cumulative), and the longest ``/healthz`` round trip seen meanwhile by a client polling it, that is how
long the event loop was blocked at most. Default runs: the issue's attack (8 x 31 MiB) and 8 and 32 concurrent
bodies of the largest size accepted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import threading
import time

from lyra.extender.app import DEFAULT_MAX_BODY_MIB, DEFAULT_MAX_HELD_MIB, MIB
from lyra.localcluster.ports import allocate_ports
from lyra.localcluster.waiting import wait_for

SERVER = """
import sys
import uvicorn
from lyra.extender.app import MIB, FixedView, create_app
from lyra.extender.serving import server_config
from lyra.extender.view import build_view
port, body_mib, held_mib = map(int, sys.argv[1:4])
app = create_app(FixedView(build_view([], [])), max_body_bytes=body_mib * MIB, max_held_bytes=held_mib * MIB)
uvicorn.Server(server_config(app, host="127.0.0.1", port=port, client_timeout_s=10)).run()
"""


def body_of(size: int) -> bytes:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}}
    head = json.dumps({"Pod": pod, "NodeNames": ["n0"]})[:-1].encode() + b',"pad":['
    count = (size - len(head) - 4) // 3
    return head + b"{}," * count + b"{}]}"


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def healthz(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/healthz")
        connection.getresponse().read()
    finally:
        connection.close()


def attack(port: int, clients: int, size: int) -> tuple[list[str], float]:
    """Statuses of ``clients`` concurrent posts of ``size`` bytes, and the longest /healthz round trip meanwhile."""
    body = body_of(size)
    statuses: list[str] = []
    longest = 0.0
    done = threading.Event()

    def send() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            connection.request("POST", "/prioritize", body=body, headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            statuses.append(str(answer.status))
        except OSError as error:
            statuses.append(type(error).__name__)  # refused and closed while sending
        finally:
            connection.close()

    def probe() -> None:
        nonlocal longest
        while not done.is_set():
            started = time.perf_counter()
            healthz(port)
            longest = max(longest, time.perf_counter() - started)

    prober = threading.Thread(target=probe)
    prober.start()
    senders = [threading.Thread(target=send) for _ in range(clients)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    done.set()
    prober.join()
    return sorted(statuses), longest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-body-mib", type=int, default=DEFAULT_MAX_BODY_MIB)
    parser.add_argument("--max-held-mib", type=int, default=DEFAULT_MAX_HELD_MIB)
    parser.add_argument("runs", nargs="*", help="CLIENTS:MIB (default: 8:31, then 8 and 32 largest bodies)")
    args = parser.parse_args()
    runs = args.runs or ["8:31", f"8:{args.max_body_mib}", f"32:{args.max_body_mib}"]
    [port] = allocate_ports(1)
    command = [sys.executable, "-c", SERVER, str(port), str(args.max_body_mib), str(args.max_held_mib)]
    server = subprocess.Popen(command)
    try:
        wait_for(lambda: _answers(port), 30, "the extender to start")
        idle = peak_rss_mib(server.pid)
        print(f"limits: body {args.max_body_mib} MiB, held {args.max_held_mib} MiB; idle RSS {idle:.0f} MiB")
        for run in runs:
            clients, mib = (int(part) for part in run.split(":"))
            size = mib * MIB
            statuses, longest = attack(port, clients, size)
            counts = {status: statuses.count(status) for status in statuses}
            print(
                f"{clients} x {size / MIB:.0f} MiB: {counts}; peak RSS {peak_rss_mib(server.pid):.0f} MiB; "
                f"longest /healthz {longest:.2f} s"
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def _answers(port: int) -> bool:
    try:
        healthz(port)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
