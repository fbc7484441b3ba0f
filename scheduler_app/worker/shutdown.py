"""Signal handling: the first SIGTERM/SIGINT stops gracefully, a second exits at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator

logger = logging.getLogger("scheduler_app.worker")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Exit status after a forced stop: leases cover the jobs left running.
FORCED_EXIT_STATUS = 1


@contextlib.contextmanager
def graceful_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on the first stop signal; exit immediately on the second.

    The handler itself only writes the signal's number to a pipe. A Python
    handler runs on the main thread between any two bytecodes, possibly while
    that thread holds a lock that ``stop`` or logging needs (the lock inside a
    ``threading.Event`` it is waiting on, for one), and would then wait for
    itself forever. A thread of its own reads the pipe, logs, and acts.

    Restores the previous handlers when the block ends.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def handle(signum: int, frame: object) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(write_end, bytes([signum]))

    def act() -> None:
        received = 0
        while signums := os.read(read_end, 16):  # b"" once the block has ended
            for signum in signums:
                received += 1
                name = signal.Signals(signum).name
                if received > 1:
                    logger.warning("second signal, exiting now signal=%s", name)
                    os._exit(FORCED_EXIT_STATUS)
                logger.info("stopping: no new claims, finishing running jobs signal=%s", name)
                stop()

    watcher = threading.Thread(target=act, name="scheduler-signals", daemon=True)
    watcher.start()
    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(write_end)
        watcher.join()
        os.close(read_end)
