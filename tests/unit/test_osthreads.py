"""Lyra's threads as the kernel names them."""

from __future__ import annotations

import threading
from pathlib import Path

from lyra.osthreads import MAX_NAME_BYTES, name_os_thread


def _kernel_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().rstrip("\n")


def _named_in_a_thread(python_name: str, name: str | None) -> str:
    seen: list[str] = []

    def run() -> None:
        name_os_thread(name)
        seen.append(_kernel_name(threading.get_native_id()))

    thread = threading.Thread(target=run, name=python_name)
    thread.start()
    thread.join()
    return seen[0]


def test_a_thread_takes_its_python_name_unless_given_one() -> None:
    assert _named_in_a_thread("watch-pods", None) == "watch-pods"
    assert _named_in_a_thread("Thread-9", "extender-ranks") == "extender-ranks"


def test_a_long_name_is_cut_to_what_the_kernel_keeps() -> None:
    assert _named_in_a_thread("watch-trainingjobs", None) == "watch-trainingjobs"[:MAX_NAME_BYTES]


def test_naming_one_thread_leaves_the_process_and_its_other_threads_as_they_were() -> None:
    main = _kernel_name(threading.get_native_id())
    _named_in_a_thread("watch-nodes", None)
    assert _kernel_name(threading.get_native_id()) == main
