"""Run execution jobs on the local machine: one worker per GPU (or N on a CPU-only machine).

Each worker takes the next job, pins it to its GPU through CUDA_VISIBLE_DEVICES and runs it in
its own process (see ``grader.execute``). Results come back to the calling thread in completion
order, so a single process records them: workers never touch the gradebook.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from grader.execute import Job, Outcome, execute

T = TypeVar("T")


def local_slots(device: str, jobs: int | None) -> list[str | None]:
    """One slot per visible GPU (its index), or ``jobs`` CPU slots (default: 2, or 1 on one core).

    More jobs than GPUs share the GPUs round-robin: quicker for correctness-only batches, but then
    one notebook's run can overlap another's timing, so performance grades want one job per GPU.
    """
    if device == "gpu":
        import torch

        count = torch.cuda.device_count()
        return [str(i % count) for i in range(count if jobs is None else jobs)]
    return [None] * max(1, jobs or min(2, os.cpu_count() or 1))


def run_local(tasks: Sequence[tuple[T, Job]], slots: list[str | None],
              run: Callable[[Job], Outcome] = execute) -> Iterator[tuple[T, Outcome]]:
    """Yield (tag, outcome) for every task as it finishes, running len(slots) at a time."""
    pending: queue.Queue[tuple[T, Job]] = queue.Queue()
    for task in tasks:
        pending.put(task)
    finished: queue.Queue[tuple[T, Outcome]] = queue.Queue()

    def worker(gpu: str | None) -> None:
        while True:
            try:
                tag, job = pending.get_nowait()
            except queue.Empty:
                return
            try:
                outcome = run(replace(job, gpu=gpu))
            except Exception as error:  # the executor itself failed; the batch goes on
                outcome = Outcome("grader_error", f"{type(error).__name__}: {error}")
            finished.put((tag, outcome))

    threads = [threading.Thread(target=worker, args=(gpu,), daemon=True) for gpu in slots]
    for thread in threads:
        thread.start()
    for _ in range(len(tasks)):
        yield finished.get()
    for thread in threads:
        thread.join()
