"""Signal handling: the first SIGTERM/SIGINT stops gracefully, a second exits at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator

logger = logging.getLogger("scheduler_app.worker")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Exit status after a forced stop: leases cover the jobs left running.
FORCED_EXIT_STATUS = 1


@contextlib.contextmanager
def graceful_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on the first stop signal; exit immediately on the second.

    Restores the previous handlers when the block ends.
    """
    received: list[int] = []

    def handle(signum: int, frame: object) -> None:
        received.append(signum)
        if len(received) > 1:
            logger.warning("second signal, exiting now signal=%s", signal.Signals(signum).name)
            os._exit(FORCED_EXIT_STATUS)
        logger.info(
            "stopping: no new claims, finishing running jobs signal=%s", signal.Signals(signum).name
        )
        stop()

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
