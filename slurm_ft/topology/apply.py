"""Give a worker its CPUs and memory node by letting it inherit them from the spawning thread.

A new process starts with the CPU affinity and the NUMA memory policy of the thread that
forked it, and keeps both across ``exec``. So the launcher's main thread (the only one
that spawns, see ``launch.workers``) sets its own affinity and memory policy to the
worker's, spawns, and restores them. The worker is born placed: no window in which its
first threads (OpenMP, CUDA, data loaders) start on the wrong CPUs, which an
``os.sched_setaffinity(pid)`` after ``Popen`` would leave open (it changes one thread
only), and no extra ``exec`` of ``taskset``/``numactl`` (not installed everywhere; numactl
is the only common tool that sets a memory policy). The other launcher threads are not
affected: affinity and memory policy are per thread.

The memory policy is ``MPOL_PREFERRED`` on the GPU's node: allocations go there while it
has free memory and fall back elsewhere instead of failing (``MPOL_BIND`` could OOM a
worker whose node fills up with page cache). It is set with the raw ``set_mempolicy``
system call through ctypes; glibc does not wrap it and libnuma is not a dependency.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

MPOL_PREFERRED = 1
_MASK_BITS = 1024  # MAX_NUMNODES of the largest kernel configuration
_WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


class _MaskType(ctypes.Array[ctypes.c_ulong]):
    """A node mask as the memory policy system calls read and write it."""

    _type_ = ctypes.c_ulong
    _length_ = _MASK_BITS // _WORD_BITS


# (get_mempolicy, set_mempolicy) system call numbers
_SYSCALLS = {"x86_64": (239, 238), "aarch64": (236, 237), "ppc64le": (260, 261)}


class _MemPolicy:
    """The calling thread's memory policy, read and written through the raw system calls."""

    def __init__(self) -> None:
        numbers = _SYSCALLS.get(os.uname().machine)
        if numbers is None:
            raise OSError(f"memory policy system calls unknown on {os.uname().machine}")
        self._get, self._set = numbers
        self._libc = ctypes.CDLL(None, use_errno=True)

    def get(self) -> tuple[int, _MaskType]:
        mode = ctypes.c_int(0)
        mask = _MaskType()
        if self._libc.syscall(self._get, ctypes.byref(mode), mask, _MASK_BITS, None, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"get_mempolicy: {os.strerror(err)}")
        return mode.value, mask

    def set(self, mode: int, mask: _MaskType) -> None:
        # The kernel reads maxnode - 1 bits: pass one more than the mask holds.
        if self._libc.syscall(self._set, mode, mask, _MASK_BITS + 1) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"set_mempolicy: {os.strerror(err)}")


def _node_mask(node: int) -> _MaskType:
    mask = _MaskType()
    mask[node // _WORD_BITS] = 1 << (node % _WORD_BITS)
    return mask


def mempolicy_problem(node: int) -> str | None:
    """None when this thread can prefer ``node`` for memory (tried and undone); else why not.

    Containers often forbid ``set_mempolicy`` without CAP_SYS_NICE (Docker's default
    seccomp profile), and a cpuset may exclude the node: the launcher asks once at start.
    """
    try:
        policy = _MemPolicy()
        mode, mask = policy.get()
        policy.set(MPOL_PREFERRED, _node_mask(node))
        policy.set(mode, mask)
    except OSError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def inherited_by_children(cpus: frozenset[int] | None, mem_node: int | None) -> Iterator[None]:
    """Within the block, processes this thread starts get ``cpus`` and prefer ``mem_node``.

    Main thread only. Errors setting the affinity propagate (the planner only chooses
    allowed CPUs, so one means the task's CPUs changed under us); the memory policy was
    probed at start with :func:`mempolicy_problem` and is best effort here.
    """
    if cpus is None and mem_node is None:
        yield
        return
    saved_cpus = os.sched_getaffinity(0) if cpus is not None else None
    policy: _MemPolicy | None = None
    saved_policy: tuple[int, _MaskType] | None = None
    if mem_node is not None:
        with contextlib.suppress(OSError):
            policy = _MemPolicy()
            saved_policy = policy.get()
            policy.set(MPOL_PREFERRED, _node_mask(mem_node))
    try:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        yield
    finally:
        if saved_cpus is not None:
            os.sched_setaffinity(0, saved_cpus)
        if policy is not None and saved_policy is not None:
            with contextlib.suppress(OSError):
                policy.set(*saved_policy)
