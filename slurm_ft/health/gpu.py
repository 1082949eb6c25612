"""GPU health through NVML, behind one thin adapter so tests can swap in a fake.

``NvmlAdapter`` is the only place that touches ``pynvml``; it turns NVML's error zoo into
three exceptions the policy understands: unavailable (no library, no driver), not
supported (this GPU/driver cannot answer: a skip, never a failure) and any other error
(the GPU answered badly: a failure). pynvml itself is imported only when a GPU check
runs, so the health package stays cheap to import.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from slurm_ft.health.result import Result, Status

MIB = 1024 * 1024
NOT_JUDGED = "not judged while workers run"
LIBRARY = "libnvidia-ml.so.1"

RECOVERY_ACTIONS = {
    0: "NONE",
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}


class NvmlUnavailable(Exception):
    """No NVML library or no driver: GPUs cannot be checked on this node."""


class NvmlNotSupported(Exception):
    """The GPU or driver does not implement this query."""


class NvmlError(Exception):
    """NVML answered with an error other than 'not supported'."""


class NvmlAdapter:
    """pynvml calls by device index; the fake in the tests implements the same methods."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._handles: dict[int, Any] = {}

    @classmethod
    def open(cls) -> NvmlAdapter:
        import ctypes

        try:
            # Loading the library first is ~1 ms where importing pynvml costs ~40 ms: nodes
            # without a driver (CPU nodes, login nodes) learn "skip" cheaply.
            ctypes.CDLL(LIBRARY)
        except OSError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
        except OSError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
        return cls(pynvml)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self._nvml.NVML_ERROR_NOT_SUPPORTED:
                raise NvmlNotSupported(str(exc)) from None
            raise NvmlError(str(exc)) from None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call(self._nvml.nvmlDeviceGetHandleByIndex, index)
        return self._handles[index]

    def device_count(self) -> int:
        return int(self._call(self._nvml.nvmlDeviceGetCount))

    def name(self, index: int) -> str:
        value = self._call(self._nvml.nvmlDeviceGetName, self._handle(index))
        return value.decode() if isinstance(value, bytes) else str(value)

    def pci_bus_id(self, index: int) -> str:
        """NVML's spelling, ``00000000:18:00.0``; the topology reader normalises it."""
        info = self._call(self._nvml.nvmlDeviceGetPciInfo, self._handle(index))
        value = info.busId
        return value.decode() if isinstance(value, bytes) else str(value)

    def uuid(self, index: int) -> str:
        value = self._call(self._nvml.nvmlDeviceGetUUID, self._handle(index))
        return value.decode() if isinstance(value, bytes) else str(value)

    def recovery_action(self, index: int) -> int:
        nv = self._nvml
        (field,) = self._call(
            nv.nvmlDeviceGetFieldValues, self._handle(index), [nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
        )
        if field.nvmlReturn == nv.NVML_ERROR_NOT_SUPPORTED:
            raise NvmlNotSupported("recovery action field")
        if field.nvmlReturn != nv.NVML_SUCCESS:
            raise NvmlError(f"recovery action field: NVML return {field.nvmlReturn}")
        return int(field.value.uiVal)

    def remapped_rows(self, index: int) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failed) remapped rows."""
        corr, unc, pending, failed = self._call(self._nvml.nvmlDeviceGetRemappedRows, self._handle(index))
        return int(corr), int(unc), int(pending), int(failed)

    def volatile_uncorrected_ecc(self, index: int) -> int:
        nv = self._nvml
        return int(
            self._call(
                nv.nvmlDeviceGetTotalEccErrors,
                self._handle(index),
                nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nv.NVML_VOLATILE_ECC,
            )
        )

    def retired_pages_pending(self, index: int) -> bool:
        return bool(self._call(self._nvml.nvmlDeviceGetRetiredPagesPendingStatus, self._handle(index)))

    def processes(self, index: int) -> list[tuple[int, int]]:
        """(pid, used bytes) of compute and graphics processes; 0 bytes when NVML hides it."""
        nv = self._nvml
        handle = self._handle(index)
        out: dict[int, int] = {}
        for fn in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            for proc in self._call(fn, handle):
                used = proc.usedGpuMemory if isinstance(proc.usedGpuMemory, int) else 0
                out[int(proc.pid)] = out.get(int(proc.pid), 0) + used
        return sorted(out.items())

    def memory_used(self, index: int) -> int:
        return int(self._call(self._nvml.nvmlDeviceGetMemoryInfo, self._handle(index)).used)


Opener = Callable[[], NvmlAdapter]


@dataclass(frozen=True)
class _Sub:
    status: Status
    detail: str


def _query(fn: Callable[[], Any]) -> tuple[Any, _Sub | None]:
    try:
        return fn(), None
    except NvmlNotSupported:
        return None, _Sub(Status.SKIP, "not supported")
    except NvmlError as exc:
        return None, _Sub(Status.FAIL, f"NVML error: {exc}")


def judge_gpu(nvml: Any, index: int, own_pids: Collection[int], tolerance_mib: int | None) -> Result:
    """All per-GPU checks; each NotSupported answer is a skip of that check alone.
    ``tolerance_mib`` None: foreign memory is not judged (while the job's own workers hold
    the GPUs, whose pids NVML may give from another pid namespace)."""
    start = time.monotonic()
    subs: dict[str, _Sub] = {}

    action, err = _query(lambda: nvml.recovery_action(index))
    if err is None:
        word = RECOVERY_ACTIONS.get(action, str(action))
        ok = action == 0
        subs["recovery_action"] = _Sub(Status.PASS if ok else Status.FAIL, f"recovery action {word}")
    else:
        subs["recovery_action"] = err

    rows, err = _query(lambda: nvml.remapped_rows(index))
    if err is None:
        _, _, pending, failed = rows
        if failed:
            subs["remapped_rows"] = _Sub(Status.FAIL, "row remapping failed")
        elif pending:
            subs["remapped_rows"] = _Sub(Status.FAIL, "row remapping pending (reset needed)")
        else:
            subs["remapped_rows"] = _Sub(Status.PASS, "no remapping pending")
    else:
        subs["remapped_rows"] = err

    ecc, err = _query(lambda: nvml.volatile_uncorrected_ecc(index))
    if err is None:
        subs["ecc"] = (
            _Sub(Status.FAIL, f"{ecc} volatile uncorrected ECC errors")
            if ecc
            else _Sub(Status.PASS, "no volatile uncorrected ECC errors")
        )
    else:
        subs["ecc"] = err

    pending_pages, err = _query(lambda: nvml.retired_pages_pending(index))
    if err is None:
        subs["retired_pages"] = (
            _Sub(Status.FAIL, "retired pages pending (reset needed)")
            if pending_pages
            else _Sub(Status.PASS, "no retired pages pending")
        )
    else:
        subs["retired_pages"] = err

    foreign: list[tuple[int, int]] = []
    if tolerance_mib is None:
        subs["foreign_memory"] = _Sub(Status.SKIP, NOT_JUDGED)
    else:
        procs, err = _query(lambda: nvml.processes(index))
        if err is None:
            foreign = [(pid, used) for pid, used in procs if pid not in own_pids]
            foreign_mib = sum(used for _, used in foreign) // MIB
            if foreign_mib > tolerance_mib:
                pids = ", ".join(str(pid) for pid, _ in foreign)
                subs["foreign_memory"] = _Sub(
                    Status.FAIL, f"processes not ours hold {foreign_mib} MiB (pids {pids})"
                )
            else:
                subs["foreign_memory"] = _Sub(Status.PASS, f"foreign memory {foreign_mib} MiB")
        else:
            subs["foreign_memory"] = err

    data: dict[str, Any] = {k: {"status": s.status.value, "detail": s.detail} for k, s in subs.items()}
    if foreign:
        data["foreign_processes"] = [{"pid": p, "used_mib": u // MIB} for p, u in foreign]
    failed_subs = [s.detail for s in subs.values() if s.status is Status.FAIL]
    took = time.monotonic() - start
    if failed_subs:
        return Result(f"gpu:{index}", Status.FAIL, "; ".join(failed_subs), took, data)
    if all(s.status is Status.SKIP for s in subs.values()):
        return Result(f"gpu:{index}", Status.SKIP, "no health query supported", took, data)
    skipped = [k for k, s in subs.items() if s.status is Status.SKIP]
    detail = "ok" + (f" (not supported: {', '.join(skipped)})" if skipped else "")
    return Result(f"gpu:{index}", Status.PASS, detail, took, data)


def check(
    expected: int | None,
    tolerance_mib: int | None,
    own_pids: Collection[int],
    opener: Opener = NvmlAdapter.open,
) -> list[Result]:
    start = time.monotonic()
    try:
        nvml = opener()
    except NvmlUnavailable as exc:
        took = time.monotonic() - start
        if expected:
            return [Result("gpu", Status.FAIL, f"{expected} GPUs expected but {exc}", took, {})]
        return [Result("gpu", Status.SKIP, str(exc), took, {})]
    try:
        return _check_open(nvml, expected, tolerance_mib, own_pids, start)
    finally:
        nvml.close()


def _check_open(
    nvml: Any, expected: int | None, tolerance_mib: int | None, own_pids: Collection[int], start: float
) -> list[Result]:
    try:
        count = nvml.device_count()
    except (NvmlError, NvmlNotSupported) as exc:
        return [Result("gpu:count", Status.FAIL, f"cannot count GPUs: {exc}", time.monotonic() - start, {})]
    data = {"count": count, "expected": expected}
    if expected is not None and count != expected:
        results = [
            Result(
                "gpu:count",
                Status.FAIL,
                f"found {count} GPUs, expected {expected}",
                time.monotonic() - start,
                data,
            )
        ]
    else:
        results = [Result("gpu:count", Status.PASS, f"{count} GPUs", time.monotonic() - start, data)]
    results += [judge_gpu(nvml, i, own_pids, tolerance_mib) for i in range(count)]
    return results


def _held(nvml: Any, count: int, pids: Collection[int]) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for i in range(count):
        try:
            procs = nvml.processes(i)
        except NvmlNotSupported:
            procs = []
        out[i] = [(pid, used) for pid, used in procs if pid in pids]
    return out


def wait_for_release(
    pids: Collection[int],
    timeout: float,
    tolerance_mib: int,
    nvml: NvmlAdapter | None = None,
    *,
    poll_interval: float = 0.1,
) -> tuple[bool, str]:
    """Wait until ``pids`` hold no GPU memory and used memory fell back by what they held.

    NVML drops a process from its list before the driver has freed its memory, so a
    missing pid alone is not enough: each GPU's used memory must also come down to at
    most (used at the start - what the pids held at the start + tolerance).
    """
    owned = nvml is None
    if nvml is None:
        try:
            nvml = NvmlAdapter.open()
        except NvmlUnavailable as exc:
            return True, f"skipped: {exc}"
    pidset = frozenset(pids)
    tolerance = tolerance_mib * MIB
    start = time.monotonic()
    try:
        count = nvml.device_count()
        held0 = _held(nvml, count, pidset)
        floor = {i: nvml.memory_used(i) - sum(u for _, u in held0[i]) for i in range(count)}
        while True:
            held = _held(nvml, count, pidset)
            excess = {i: nvml.memory_used(i) - floor[i] for i in range(count)}
            blocking = [i for i in range(count) if held[i] or excess[i] > tolerance]
            waited = time.monotonic() - start
            if not blocking:
                return True, f"released after {waited:.2f} s"
            if waited >= timeout:
                i = blocking[0]
                if held[i]:
                    who = ", ".join(f"pid {p} ({u // MIB} MiB)" for p, u in held[i])
                    return False, f"gpu {i}: still held after {timeout:g} s by {who}"
                return False, (
                    f"gpu {i}: {excess[i] // MIB} MiB still in use above the start after {timeout:g} s"
                )
            time.sleep(min(poll_interval, max(0.0, timeout - waited)))
    except (NvmlError, NvmlNotSupported) as exc:
        return False, f"NVML error while waiting for GPU memory release: {exc}"
    finally:
        if owned:
            nvml.close()
