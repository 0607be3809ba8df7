"""Every Python process of an air-gap test run records its attempts to reach beyond loopback.

tests/slow/pipeline/test_airgap.py puts this folder first on PYTHONPATH, and Python imports `sitecustomize` at
start-up from the path, so every Python process of the run (the CLI, the temporary Prefect server,
Dask workers, training ranks, any subprocess they start) installs this audit hook. It appends to
the file `$FOUNDRY_NET_AUDIT` one JSON line per process when it starts, and one per attempt: a
connection or datagram to an address that is not loopback, or a host name lookup (this machine's
resolver is not on loopback, so any lookup of a name other than localhost is an outbound attempt).
Nothing else is changed: the hook only records, it never blocks.
"""

import ipaddress
import json
import os
import sys

_LOG = os.environ.get("FOUNDRY_NET_AUDIT")
_LOCAL_NAMES = {"", "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_ADDRESS_EVENTS = {"socket.connect", "socket.sendto", "socket.sendmsg"}
_NAME_EVENTS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"}


def _is_local(host) -> bool:
    if host is None:
        return True
    host = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a name: looking it up leaves the machine
    return address.is_loopback or address.is_unspecified


def _record(entry: dict) -> None:
    line = (json.dumps({"pid": os.getpid(), **entry}) + "\n").encode()
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write with O_APPEND: lines from concurrent processes do not interleave
    finally:
        os.close(fd)


def _hook(event: str, args: tuple) -> None:
    if event in _ADDRESS_EVENTS:
        address = args[1] if len(args) > 1 else None
        if isinstance(address, tuple) and not _is_local(address[0]):  # str or bytes: a Unix socket's path
            _record({"event": event, "target": repr(address)})
    elif event in _NAME_EVENTS and args and not _is_local(args[0]):
        _record({"event": event, "target": repr(args[0])})


if _LOG:
    try:
        with open("/proc/self/cmdline", "rb") as _f:
            _command = _f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        _command = " ".join(sys.argv)
    _record({"event": "started", "target": _command})
    sys.addaudithook(_hook)
