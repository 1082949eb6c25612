"""How long the launcher's process waits for its DNS: the reverse lookups torch makes on
every store connection (issue 45). A module of its own, light to import: the launcher sets
it before anything else, and a one-node launch, which opens no connection, pays nothing
for ``stores``."""

from __future__ import annotations

from collections.abc import MutableMapping

# glibc's resolver options for a launcher whose user set none
RESOLVER_OPTIONS = "timeout:1 attempts:1"


def bound_reverse_lookups(environ: MutableMapping[str, str]) -> None:
    """torch's client names the address it connects to before it connects (for its log
    line, ``getnameinfo`` without ``NI_NUMERICHOST``), and connects to an IPv4 address
    mapped into IPv6, which ``/etc/hosts`` never lists: every connection is a query to the
    cluster's DNS, three per launcher at a job's start and three per survivor in a
    succession. In a storm of thousands a dropped query costs glibc's default 5 s, twice:
    one connection in about 50 waited 5 s here, and the scale harness's first connection
    of 4,096 launchers took 19 s (6.6 s with this). The name is never used (torch falls
    back to the number), so this process asks once, for a second. glibc reads
    ``RES_OPTIONS`` once, with resolv.conf, at the process's first lookup: called before
    any. Forward lookups of the nodes' names get the same second; a user whose DNS needs
    longer sets ``RES_OPTIONS`` and keeps it. In this process's environment only: the
    workers get the environment captured before."""
    environ.setdefault("RES_OPTIONS", RESOLVER_OPTIONS)
