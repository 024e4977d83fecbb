"""What goes in Lyra's images: one recipe, read by the builder (:mod:`lyra.images.build`) and held by a unit test
to the Dockerfile's (tests/unit/deploy/test_image_recipes.py), so both give the same content.

Lyra's image: Debian bookworm (minbase, documentation left out as in Debian's slim images), Debian's Python 3.11,
and the environment uv installs from uv.lock without the dev groups and without the ``report`` extra (no plotting
library), in /opt/lyra; it runs ``lyra`` as the non-root user 65532 (the chart's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Debian release and mmdebstrap variant of the base filesystem (the Dockerfile: debian:bookworm-*-slim).
SUITE: Final = "bookworm"
VARIANT: Final = "minbase"
#: The base's apt sources: the release with its updates and security updates, as Debian's own images have them.
SOURCES: Final = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
#: Debian's Python 3.11, pinned like the Dockerfile's apt-get install.
PYTHON_PACKAGE: Final = "python3=3.11.2-1+b1"
PYTHON: Final = "/usr/bin/python3.11"
#: dpkg paths left out of the base, as Debian's slim images do (copyright files kept).
DPKG_EXCLUDES: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)

#: Where the locked environment lives in the image (UV_PROJECT_ENVIRONMENT).
VENV: Final = "/opt/lyra"
#: The install command, run in the project's directory inside the base filesystem: the lock as it is, no dev groups,
#: no extras (so no matplotlib), the project itself installed as a wheel.
UV_SYNC: Final = ("uv", "sync", "--locked", "--no-dev", "--no-editable")
#: uv's settings for that command (both recipes).
UV_ENV: Final = {
    "UV_COMPILE_BYTECODE": "1",
    "UV_LINK_MODE": "copy",
    "UV_PYTHON_DOWNLOADS": "never",
    "UV_PROJECT_ENVIRONMENT": VENV,
    "UV_PYTHON": PYTHON,
}
#: The files of the repository the install reads (the Dockerfile's COPY lines, .dockerignore's exceptions).
PROJECT_FILES: Final = ("pyproject.toml", "uv.lock", "README.md", "src")

#: The chart's non-root user (lyra.chart.values.NON_ROOT_UID); the upstream pause image runs as 65535.
USER: Final = "65532:65532"
PAUSE_USER: Final = "65535:65535"
SYSTEM_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LYRA_ENV: Final = {
    "PATH": f"{VENV}/bin:{SYSTEM_PATH}",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
ENTRYPOINT: Final = ("lyra",)
CMD: Final = ("--help",)
PORTS: Final = ("8080/tcp", "8888/tcp")

#: Image names as a kubelet asks containerd for them (a bare ``lyra`` is ``docker.io/library/lyra``).
LYRA_REPOSITORY: Final = "docker.io/library/lyra"
SCHEDULER_REPOSITORY: Final = "registry.k8s.io/kube-scheduler"
PAUSE_REPOSITORY: Final = "registry.k8s.io/pause"
PAUSE_TAG: Final = "3.10"
WORKLOADS_DIR: Final = "/opt/workloads"


@dataclass(frozen=True)
class Workload:
    """A demo workload image: the base filesystem and one standalone program of :mod:`lyra.workloads`."""

    image: str  # short name, also the archive's
    module: str  # file name in src/lyra/workloads
    ports: tuple[str, ...]


TRAINING_WORKER: Final = Workload(image="lyra-training-worker", module="training_worker.py", ports=())
INFERENCE_REPLICA: Final = Workload(image="lyra-inference-replica", module="inference_replica.py", ports=("8000/tcp",))
WORKLOADS: Final = (TRAINING_WORKER, INFERENCE_REPLICA)

#: Every image ``lyra image build`` makes, by the name ``--only`` takes.
IMAGES: Final = ("lyra", "kube-scheduler", "pause", TRAINING_WORKER.image, INFERENCE_REPLICA.image)
