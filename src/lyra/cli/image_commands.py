"""`lyra image`: Lyra's container images built without a container engine (``build``), and run once in a private
containerd to show they work (``verify``). Exit codes: 0 success, 1 the command ran and failed, 2 bad input."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from lyra.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from lyra.cli.stopping import stopped_by, stopped_exit_code, stopped_like_ctrl_c
from lyra.imagespec.recipe import IMAGES

DEFAULT_OUT = Path("dist/images")


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the `image` command group."""
    image = commands.add_parser(
        "image",
        help="build Lyra's container images as OCI archives (no container engine needed)",
        description="Build Lyra's images (Debian bookworm, Python 3.11, the uv-locked environment) and the "
        "kube-scheduler, pause and demo workload images as OCI archives, cached by their inputs.",
    )
    actions = image.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build",
        help="build the images into OCI archives (fast when nothing changed); needs root, apt and gcc",
        description="Build the images into OCI archives in --out-dir (default dist/images). The base filesystem "
        "comes from mmdebstrap (Debian's package, cached like the other binaries), the environment from uv.lock "
        "installed in a chroot; the kube-scheduler image needs `make binaries` first.",
    )
    build.add_argument(
        "--only",
        action="append",
        choices=IMAGES,
        metavar="IMAGE",
        help=f"build only this image (repeatable; default: all of {', '.join(IMAGES)})",
    )
    build.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where the archives go (default dist/images)")
    build.add_argument("--repository", type=Path, default=Path(), help="Lyra's checkout (default: .)")
    build.add_argument(
        "--source", metavar="URL", help="the org.opencontainers.image.source label (default: git remote origin)"
    )
    build.set_defaults(prog=build.prog, run=run_build)

    verify = actions.add_parser(
        "verify",
        help="import the archives into a private containerd and run each image once (needs root)",
        description="Start containerd (Debian's package, cached) with its own root, state and socket in a "
        "temporary directory, import every archive of --dir, run `lyra --help`, the training worker through a "
        "SIGTERM and a resume, and the inference replica's readiness endpoint, then stop everything.",
    )
    verify.add_argument("--dir", type=Path, default=DEFAULT_OUT, help="the archives' directory (default dist/images)")
    verify.set_defaults(prog=verify.prog, run=run_verify)


def _say(message: str) -> None:
    print(message, flush=True)


def run_build(args: argparse.Namespace) -> int:
    from lyra.images.build import ImageBuilder, ImageBuildError
    from lyra.imagespec.oci import OciError

    if args.out_dir.exists() and not args.out_dir.is_dir():
        print(f"lyra image build: {args.out_dir} is not a directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not (args.repository / "pyproject.toml").is_file():
        print(f"lyra image build: {args.repository.resolve()} has no pyproject.toml (--repository)", file=sys.stderr)
        return EXIT_BAD_INPUT
    started = time.monotonic()
    builder = ImageBuilder(args.repository, args.out_dir, _say, source=args.source)
    try:
        with stopped_like_ctrl_c():  # `timeout` or a closed terminal, as Ctrl-C: its tools stopped, its work removed
            built = builder.build(args.only or IMAGES)
    except KeyboardInterrupt as interrupt:
        print(f"lyra image build: interrupted ({stopped_by(interrupt)}); no image was half-written", file=sys.stderr)
        return stopped_exit_code(interrupt)
    except (ImageBuildError, OciError) as error:
        print(f"lyra image build: {error}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as error:
        print(f"lyra image build: {error}", file=sys.stderr)
        return EXIT_FAILED
    for item in built:
        state = "written" if item.written else "unchanged"
        _say(f"  {item.archive}  {item.reference}  {item.size / 1e6:.1f} MB  {item.digest[:19]}  ({state})")
    _say(f"{len(built)} image(s) in {args.out_dir} ({time.monotonic() - started:.1f}s)")
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    from lyra.images.verify import VerifyError, verify_archives

    if not args.dir.is_dir():
        print(f"lyra image verify: {args.dir} is not a directory (run `make image` first)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with stopped_like_ctrl_c():  # `timeout` or a closed terminal, as Ctrl-C: its containerd is stopped
            verify_archives(args.dir, _say)
    except KeyboardInterrupt as interrupt:
        print(f"lyra image verify: interrupted ({stopped_by(interrupt)}); its containerd is stopped", file=sys.stderr)
        return stopped_exit_code(interrupt)
    except VerifyError as error:
        print(f"lyra image verify: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
