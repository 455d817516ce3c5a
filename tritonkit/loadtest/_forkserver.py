"""What the fork server that load-test workers are forked from imports once (its preload).

A worker started fresh (multiprocessing's spawn) is a new interpreter that imports numpy,
gevent and the clients before it can send a request: 0.16-0.45 CPU s a worker, paid by
every level of a run and every probe of a tune. Forked from a server that has imported
them, a worker costs a fork. The server is multiprocessing's forkserver: a clean process
of its own, started once per load-test process, single-threaded, holding no connection.

Imported by the fork server alone: it ignores Ctrl-C from here on, and so does each
worker forked from it from its first instruction (the load-test process handles Ctrl-C;
the terminal sends it to the whole group).
"""

import importlib
import os
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
for _module in ("gevent", "gevent.socket", "tritonkit.loadtest._worker"):
    importlib.import_module(_module)

#: The fork server's pid: a worker's parent, whose end (the load-test process ended, so
#: the server did) ends the worker.
SERVER_PID = os.getpid()
