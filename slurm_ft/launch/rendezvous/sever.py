"""Giving back a thread blocked on a frozen store host: every socket this process holds to
the host is shut down under it (see :func:`sever`). Apart from ``stores`` because it works on
the kernel's socket tables (``/proc``), not on torch's store; only a store succession uses it.
"""

from __future__ import annotations


def _remote_ends(table: str) -> dict[int, tuple[str, int]]:
    """inode -> (remote ip, port) of each socket in a ``/proc/net/tcp{,6}`` table."""
    import ipaddress

    ends: dict[int, tuple[str, int]] = {}
    try:
        with open(table) as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return ends
    for line in lines:
        cols = line.split()
        if len(cols) < 10 or ":" not in cols[2]:
            continue
        hex_ip, hex_port = cols[2].split(":")
        raw = bytes.fromhex(hex_ip)
        # the kernel prints each 32-bit word in host (little-endian) order
        packed = b"".join(raw[k : k + 4][::-1] for k in range(0, len(raw), 4))
        ip = ipaddress.ip_address(packed)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        ends[int(cols[9])] = (str(ip), int(hex_port, 16))
    return ends


def sever(address: str, port: int) -> int:
    """Shut down every connection this process holds to ``address:port``; how many.

    A store call to a frozen host blocks in ``recv`` and cannot be interrupted: the one
    way to give a thread stuck in it back (a store succession needs the main thread) is
    to shut its socket down under it, which wakes the ``recv`` with an error (the call
    then raises as for a lost store)."""
    import socket as _socket

    try:
        ips = {str(info[4][0]) for info in _socket.getaddrinfo(address, port, proto=_socket.IPPROTO_TCP)}
    except OSError:
        return 0
    ends = {**_remote_ends("/proc/self/net/tcp"), **_remote_ends("/proc/self/net/tcp6")}
    wanted = {inode for inode, (ip, p) in ends.items() if p == port and ip in ips}
    done = 0
    import os as _os

    for name in _os.listdir("/proc/self/fd"):
        try:
            link = _os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if not link.startswith("socket:[") or int(link[8:-1]) not in wanted:
            continue
        try:
            sock = _socket.socket(fileno=_os.dup(int(name)))
        except OSError:
            continue
        try:
            sock.shutdown(_socket.SHUT_RDWR)
            done += 1
        except OSError:
            pass
        finally:
            sock.close()
    return done
