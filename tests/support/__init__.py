"""Support code shared by the test folders and benchmarks/ (not part of the veri_tui package).

Imported as `support.<module>`: tests/conftest.py puts tests/ on sys.path, and a benchmark
inserts it itself.
"""

import os
import random
import socket

#: Below Linux's ephemeral range (32768-60999): a port picked here cannot be taken by another
#: test's outgoing connection or port-0 listener (gloo, torchrun, ssh) between the pick and the
#: daemon's bind. In CI a slurmd died at start with its port gone that way.
_SERVER_PORTS = range(20000, 32000)
#: Ports already handed out in this process: free until their daemon binds them, so a bind
#: test alone would hand one out twice (a cluster's config asks for several at once).
_GIVEN: set[int] = set()


def server_port() -> int:
    """A loopback port free now, for a test daemon; each xdist worker draws from its own slice."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    width = 1000
    start = _SERVER_PORTS.start + (index * width) % len(_SERVER_PORTS)
    for port in random.sample(range(start, start + width), width):
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {start}-{start + width - 1}")
