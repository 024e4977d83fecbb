"""An elastic data-parallel training program for an unmodified ``torchrun``, as a Lyra TrainingJob runs it.

Lyra gives every worker pod torchrun's settings (``PET_NNODES=<min>:<max>``, the c10d rendezvous on a base worker,
restarts and timeouts; docs/user-guide.md), so the container's command is just ``torchrun train.py ...``. Workers
come and go: a scale-in stops a flexible worker (SIGTERM, then the grace period), a scale-out adds one, a preemption
stops them all. torchrun restarts the surviving processes into a new rendezvous each time, with a new world size, so
the program must:

* resume from its checkpoint on every start (``--checkpoint`` on storage all workers share);
* save a checkpoint often (rank 0 does, every ``--checkpoint-every`` steps: a scale-in stops another worker without
  warning rank 0, and the survivors go on from the last checkpoint) and on SIGTERM (a preemption stops rank 0 too),
  stopping at a step boundary;
* split each step's global batch over however many ranks there are, so the result does not depend on the world size.

The model is deliberately tiny: a scalar ``w`` fitted by SGD to the samples ``x_i = i mod 13`` with the loss
``(w - x_i)^2 / 2``; step ``t`` uses samples ``t*batch .. (t+1)*batch - 1`` whatever the world size, so the final
``w`` has a closed form (``tests/launcher`` checks it). Replace the model and the data with yours and keep the rest.
``--progress`` appends one JSON line per completed step and per start, for tests and dashboards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

MODULUS = 13


def sample(index: int) -> float:
    return float(index % MODULUS)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint file on storage all workers share")
    parser.add_argument("--steps", type=int, default=1000, help="steps in all (default 1000)")
    parser.add_argument("--batch", type=int, default=24, help="global batch: samples per step over all ranks")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (default 0.05)")
    parser.add_argument(
        "--checkpoint-every", type=int, default=1, help="steps between checkpoints (default 1); SIGTERM saves too"
    )
    parser.add_argument("--progress", type=Path, help="append a JSON line per completed step and per start")
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        help="least time a step takes: stands in for a real model's compute (default 0)",
    )
    parser.add_argument(
        "--collective-timeout",
        type=float,
        default=60.0,
        help="seconds a collective may wait for a peer that is gone without closing its connections (default 60)",
    )
    return parser.parse_args(argv)


def load(path: Path) -> tuple[int, torch.Tensor]:
    """The step to run next and the model: from the checkpoint, or the start."""
    if path.exists():
        state = torch.load(path)
        return int(state["step"]), state["w"]
    return 0, torch.zeros(1, dtype=torch.float64)


def save(path: Path, step: int, w: torch.Tensor) -> None:
    """Write atomically: a worker stopped half-way through never leaves a torn checkpoint."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    torch.save({"step": step, "w": w.detach().clone()}, partial)
    os.replace(partial, path)


def record(path: Path | None, **event: object) -> None:
    if path is not None:
        with path.open("a") as log:
            log.write(json.dumps({"time": round(time.time(), 3), **event}) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stopping = threading.Event()
    # SIGTERM: finish the step under way, save, exit. torchrun's agent forwards it to every worker it runs.
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    dist.init_process_group("gloo", timeout=timedelta(seconds=args.collective_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    start, w = load(args.checkpoint)
    if rank == 0:
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        record(args.progress, event="start", step=start, world=world, restart=int(restart))
        print(f"rank 0 of {world}: resuming at step {start} with w={w.item():.6f}", flush=True)
    saved = start
    step = start
    while step < args.steps and not stopping.is_set():
        began = time.monotonic()
        batch = range(step * args.batch, (step + 1) * args.batch)
        mine = torch.tensor([sample(i) for i in batch[rank::world]], dtype=torch.float64)
        w.requires_grad_(True)
        loss = 0.5 * ((w - mine) ** 2).sum()
        (grad,) = torch.autograd.grad(loss, w)
        try:
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)  # the sum over the whole global batch
        except RuntimeError as error:  # a peer left (scale-in): torchrun restarts us into a new rendezvous
            print(f"rank {rank}: step {step} failed ({type(error).__name__}); restarting", file=sys.stderr)
            return 1
        with torch.no_grad():
            w = w - args.lr * grad / args.batch
        step += 1
        if rank == 0:
            if step % args.checkpoint_every == 0:
                save(args.checkpoint, step, w)
                saved = step
            record(args.progress, event="step", step=step, world=world)
        remaining = args.step_seconds - (time.monotonic() - began)
        if remaining > 0:
            stopping.wait(remaining)
    if rank == 0 and saved != step:
        save(args.checkpoint, step, w)
    if stopping.is_set():
        print(f"rank {rank}: stopped by SIGTERM after step {step}; checkpoint saved", flush=True)
        return 0
    dist.destroy_process_group()
    if rank == 0:
        print(f"done: {step} steps, w={w.item():.12f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
