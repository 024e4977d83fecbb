"""A training worker: fits y = 3x + 1 by stochastic gradient descent, one step at a time, and checkpoints.

Environment:
    LYRA_CHECKPOINT_PATH   file the checkpoint is written to and resumed from (required)
    LYRA_STEPS             stop after this many steps in all (0, the default: run until SIGTERM)
    LYRA_STEP_SECONDS      time per step (default 0.1)
    LYRA_CHECKPOINT_EVERY  also checkpoint every this many steps (default 50; 0: only on exit)

On SIGTERM (what the kubelet sends when a pod is deleted, e.g. a reclaim by scale-in) it finishes the step it is in,
writes the checkpoint (atomically: a temporary file renamed over it) and exits 0, well inside any grace period of a
second or more. On start it resumes from the checkpoint if one exists. Bad input: exit 2 with a message.
Standard library only: the image is the base filesystem plus this file.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType

EXIT_BAD_INPUT = 2
SLOPE, INTERCEPT, LEARNING_RATE = 3.0, 1.0, 0.05


@dataclass
class State:
    step: int = 0
    w: float = 0.0
    b: float = 0.0
    loss: float = math.inf


@dataclass(frozen=True)
class Settings:
    checkpoint: Path
    steps: int
    step_seconds: float
    checkpoint_every: int


class BadInputError(ValueError):
    pass


def settings_from(environ: dict[str, str]) -> Settings:
    path = environ.get("LYRA_CHECKPOINT_PATH", "").strip()
    if not path:
        raise BadInputError("LYRA_CHECKPOINT_PATH is not set: the file to write the checkpoint to and resume from")

    def number(name: str, default: str, kind: type[int] | type[float]) -> float:
        raw = environ.get(name, default).strip()
        try:
            value = kind(raw)
        except ValueError:
            raise BadInputError(f"{name}={raw!r} is not a {kind.__name__}") from None
        if not math.isfinite(value) or value < 0:
            raise BadInputError(f"{name}={raw!r} must be a finite number >= 0")
        return value

    return Settings(
        checkpoint=Path(path),
        steps=int(number("LYRA_STEPS", "0", int)),
        step_seconds=number("LYRA_STEP_SECONDS", "0.1", float),
        checkpoint_every=int(number("LYRA_CHECKPOINT_EVERY", "50", int)),
    )


def load(path: Path) -> State:
    """The checkpoint at ``path``, or a fresh state when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return State()
    except OSError as error:
        raise BadInputError(f"cannot read the checkpoint {path}: {error.strerror}") from None
    try:
        data = json.loads(text)
        state = State(step=int(data["step"]), w=float(data["w"]), b=float(data["b"]), loss=float(data["loss"]))
    except (ValueError, KeyError, TypeError):
        raise BadInputError(f"{path} is not a checkpoint of this worker (want JSON with step, w, b, loss)") from None
    if state.step < 0:
        raise BadInputError(f"{path}: step {state.step} < 0")
    return state


def save(path: Path, state: State, reason: str) -> None:
    """Write the checkpoint atomically: a reader (or a resume) sees the old one or the new one, never half."""
    record = {**asdict(state), "reason": reason, "written_at": time.time(), "pid": os.getpid()}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        json.dump(record, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def train_step(state: State, rng: random.Random) -> None:
    x = rng.uniform(-1.0, 1.0)
    error = state.w * x + state.b - (SLOPE * x + INTERCEPT)
    state.w -= LEARNING_RATE * error * x
    state.b -= LEARNING_RATE * error
    state.loss = error * error
    state.step += 1


def run(settings: Settings) -> int:
    stop = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    state = load(settings.checkpoint)
    if state.step:
        print(f"resumed from {settings.checkpoint} at step {state.step} (w={state.w:.4f}, b={state.b:.4f})", flush=True)
    else:
        print(f"starting at step 0; checkpoints go to {settings.checkpoint}", flush=True)
    rng = random.Random(state.step)
    while not stop.is_set():
        if settings.steps and state.step >= settings.steps:
            save(settings.checkpoint, state, "done")
            print(f"done at step {state.step}: w={state.w:.4f} b={state.b:.4f} loss={state.loss:.2e}", flush=True)
            return 0
        train_step(state, rng)
        if settings.checkpoint_every and state.step % settings.checkpoint_every == 0:
            save(settings.checkpoint, state, "periodic")
        stop.wait(settings.step_seconds)
    save(settings.checkpoint, state, "sigterm")
    print(f"SIGTERM: checkpoint written at step {state.step} to {settings.checkpoint}; exiting", flush=True)
    return 0


def main() -> int:
    try:
        return run(settings_from(dict(os.environ)))
    except BadInputError as error:
        print(f"training-worker: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"training-worker: cannot write the checkpoint: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
