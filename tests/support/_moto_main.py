"""``python tests/support/_moto_main.py -H 127.0.0.1 -p PORT``: moto's server, with a faster clock.

moto reads the time through ``moto.core.utils.unix_time`` (a datetime round trip, ~25 us), and its SQS
receive looks at the queue's attributes for every message it returns, which reads the time for every
message in the queue: receives on a queue of a few hundred messages took seconds. The same time from
``time.time()`` makes them a hundred times cheaper and changes nothing else. When moto's names move, the
server runs unpatched (slower, still correct).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any


def _fast(original: Callable[..., float], scale: float) -> Callable[..., float]:
    def unix_time(dt: Any = None) -> float:
        return time.time() * scale if dt is None else original(dt)

    return unix_time


def _patch() -> None:
    try:
        import moto.sqs.models as sqs_models
        from moto.core import utils
    except ImportError:
        return
    for module in (utils, sqs_models):
        if hasattr(module, "unix_time"):
            module.unix_time = _fast(utils.unix_time, 1.0)  # type: ignore[attr-defined]
        if hasattr(module, "unix_time_millis"):
            module.unix_time_millis = _fast(utils.unix_time_millis, 1000.0)  # type: ignore[attr-defined]


if __name__ == "__main__":
    _patch()
    from moto.server import main

    sys.exit(main(sys.argv[1:]))
