"""Which TCP ports a process listens on, from Linux's /proc.

A starting tritonserver answers its health and readiness on HTTP before it binds its
metrics port, and exits when that port is taken (2.51: "failed to start Metrics service:
... already in use", then exit code 1, 0.8 s after it said READY here). A start is
therefore done only when the server holds every port it was given; a health answer alone
may also come from another process that took its HTTP port."""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"          # /proc/net/tcp's state column: TCP_LISTEN


def listening_ports(pid: int) -> set[int] | None:
    """The TCP ports (IPv4 and IPv6) process ``pid`` listens on; None where /proc cannot
    tell (no /proc, the process gone, socket tables unreadable or empty)."""
    sockets = set()
    try:
        for entry in os.scandir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(entry.path)
            except OSError:         # closed meanwhile
                continue
            if target.startswith("socket:["):
                sockets.add(target[len("socket:["):-1])
    except OSError:
        return None
    ports: set[int] = set()
    told = False                    # a table with a socket in it: /proc tells (WSL1's are empty)
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        told = told or bool(rows)
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in sockets:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports if told else None
