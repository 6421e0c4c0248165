"""The ASGI entry point for uvicorn: settings read once from the environment."""

import sys

from gateway.http.app import create_app
from gateway.http.protocol import HeaderDeadlineProtocol
from gateway.logs import configure
from gateway.settings import load_settings

# The event loop and the worker threads share one GIL. Under a CPU-bound thread (a deep graph walk
# post-processing its rows, a policy batch), a thread waiting for the GIL waits up to the switch
# interval at each hand-off, and a light call makes several (the event loop to a worker thread and
# back, per stage): at Python's default 5 ms, one tenant's heavy call added tens of milliseconds to
# another tenant's 15 ms retrieve. 1 ms bounds that wait at a small cost in throughput.
sys.setswitchinterval(0.001)

# The serving process freezes what it loaded at start out of the garbage collector's scans (see
# create_app); tests, which build many apps in one process, do not.
settings = load_settings()
configure(settings.log_level, settings.log_format)  # again in each worker process `gateway serve --workers` starts
HeaderDeadlineProtocol.header_timeout_s = settings.header_timeout_ms / 1000  # the protocol `gateway serve` names
app = create_app(settings, freeze=True)
