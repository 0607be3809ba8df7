"""`python loopback_up.py COMMAND...`: bring up the loopback interface of a fresh network namespace, then
exec COMMAND. A new namespace has only `lo`, and it starts down; this needs no iproute2 (one ioctl)."""

import fcntl
import os
import socket
import struct
import sys

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: the name, then the flags (the rest of its union unused)

with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
    fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))
os.execvp(sys.argv[1], sys.argv[1:])
