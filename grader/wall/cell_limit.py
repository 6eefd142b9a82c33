"""A run's time limits (a cell's, the kernel's start) that count only the time it could run, not the seconds the
GPU gate kept it stopped.

The gate stops a notebook run (SIGSTOP to all its processes) while a judge times on the run's GPU. A cell frozen
for a minute behind other notebooks' judges did not run for that minute, so its limit must not count it; nor must
the limit on the kernel's first reply. Papermill's limits are wall time (deadlines on a clock that runs on while a
process is stopped), so the run waits in rounds of at most 5 s and decides at the end of each round (a limit is
noticed within a round of its passing) from ``RunClock``: a clock that stands still while the process is stopped.
Its thread ticks every ``tick`` seconds; a longer gap between two ticks means the process was stopped (or starved of
CPU), and at most ``gap`` seconds of it count. The notebook's overall limit, kept outside the sandbox and net of the
gate's frozen seconds, still bounds the whole run.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from nbclient.util import ensure_async, run_hook, run_sync
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine
from papermill.log import logger

ROUND_SECONDS = 5  # the longest wait for a reply before the run's clock is read again


class RunClock:
    """Seconds of running time since it was made: wall time less what exceeds ``gap`` of each gap between ticks."""

    def __init__(self, tick: float = 0.1, gap: float = 0.5, now: Callable[[], float] = time.monotonic) -> None:
        self._tick, self._gap, self._now = tick, gap, now
        self._lock = threading.Lock()
        self._counted = 0.0
        self._last = now()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def observe(self, now: float) -> None:
        """One tick at ``now``: the time since the last one counts, up to ``gap``."""
        with self._lock:
            self._counted += min(max(now - self._last, 0.0), self._gap)
            self._last = now

    def seconds(self) -> float:
        with self._lock:
            return self._counted + min(max(self._now() - self._last, 0.0), self._gap)

    def _run(self) -> None:
        while not self._stop.wait(self._tick):
            self.observe(self._now())

    def __enter__(self) -> RunClock:
        self.observe(self._now())
        self._thread = threading.Thread(target=self._run, name="run-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class CellLimitClient(PapermillNotebookClient):
    """Papermill's client with each cell's limit, and the kernel's start, read from a ``RunClock``; ``timeout`` is
    the length of a round."""

    def __init__(self, nb_man: Any, cell_limit: float, clock: RunClock, **options: Any) -> None:
        super().__init__(nb_man, timeout=min(ROUND_SECONDS, max(1, math.ceil(cell_limit))), **options)
        self.cell_limit, self.clock = cell_limit, clock
        self._cell_began = 0.0
        self._last_round_end: float | None = None

    async def async_start_new_kernel_client(self) -> Any:
        """The kernel's client, once the kernel answers; ``startup_timeout`` seconds on the run's clock at most."""
        began = self.clock.seconds()
        try:
            self.kc = self.km.client()
            await ensure_async(self.kc.start_channels())
            while True:
                try:
                    await ensure_async(self.kc.wait_for_ready(timeout=ROUND_SECONDS))
                    break
                except RuntimeError as error:  # a kernel that died is final; one that is slow, a round's end
                    if "didn't respond" not in str(error) or self.clock.seconds() - began >= self.startup_timeout:
                        raise
        except Exception:
            await self._async_cleanup_kernel()
            raise
        self.kc.allow_stdin = False
        await run_hook(self.on_notebook_start, notebook=self.nb)
        return self.kc

    # nbclient's blocking forms wrap the base class's coroutines; papermill calls these, so wrap the ones above.
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def async_execute_cell(self, cell: Any, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True) -> Any:
        self._cell_began, self._last_round_end = self.clock.seconds(), None
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    execute_cell = run_sync(async_execute_cell)

    async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> None | dict[str, Any]:
        if self.clock.seconds() - self._cell_began >= self.cell_limit:
            return await super()._async_handle_timeout(math.ceil(self.cell_limit), cell)
        # Not over: wait another round. nbclient shortens a round when other shell messages arrive, down to
        # none at all; a round that ended at once is padded so that the wait never spins.
        now = time.monotonic()
        if self._last_round_end is not None and now - self._last_round_end < self.timeout / 2:
            await asyncio.sleep(self.timeout / 2)
        self._last_round_end = time.monotonic()
        return None


class CellLimitEngine(NBClientEngine):
    """Papermill's nbclient engine, running ``CellLimitClient``."""

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                 start_timeout: int = 60, **options: Any) -> Any:
        options.pop("input_path", None)
        return CellLimitClient(nb_man, kernel_name=kernel_name, log=logger, log_output=log_output,
                               startup_timeout=start_timeout, **options).execute()
