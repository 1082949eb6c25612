"""GPU policy against a fake NVML adapter; the real adapter's error mapping against a fake pynvml."""

from __future__ import annotations

import types

import pytest

from slurm_ft.health import Status, gpu
from slurm_ft.health.gpu import MIB, NvmlAdapter, NvmlError, NvmlNotSupported, NvmlUnavailable
from tests.support.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvml

pytestmark = pytest.mark.timeout(20)
OURS = frozenset({4242})


def run(gpus, expected=None, tolerance=1024):
    fake = FakeNvml(gpus)
    results = gpu.check(expected, tolerance, OURS, lambda: fake)
    assert fake.closed
    return {r.name: (r.status, r.detail) for r in results}


def unavailable():
    raise NvmlUnavailable("NVML unavailable: NVML Shared Library Not Found")


def test_no_nvml_skips_unless_gpus_are_expected():
    (skip,) = gpu.check(None, 1024, OURS, unavailable)
    assert (skip.name, skip.status, skip.detail) == (
        "gpu",
        Status.SKIP,
        "NVML unavailable: NVML Shared Library Not Found",
    )
    (fail,) = gpu.check(4, 1024, OURS, unavailable)
    assert (fail.status, fail.detail) == (
        Status.FAIL,
        "4 GPUs expected but NVML unavailable: NVML Shared Library Not Found",
    )
    (zero,) = gpu.check(0, 1024, OURS, unavailable)
    assert zero.status is Status.SKIP


def test_healthy_gpus_pass_and_count_matches():
    got = run([FakeGpu(), FakeGpu(processes=[(4242, 30_000 * MIB)])], expected=2)
    assert got == {
        "gpu:count": (Status.PASS, "2 GPUs"),
        "gpu:0": (Status.PASS, "ok"),
        "gpu:1": (Status.PASS, "ok"),
    }


def test_count_mismatch_fails():
    got = run([FakeGpu()] * 7, expected=8)
    assert got["gpu:count"] == (Status.FAIL, "found 7 GPUs, expected 8")


@pytest.mark.parametrize(
    ("gpu_state", "detail"),
    [
        (FakeGpu(recovery_action=1), "recovery action GPU_RESET"),
        (FakeGpu(recovery_action=2), "recovery action NODE_REBOOT"),
        (FakeGpu(recovery_action=4), "recovery action DRAIN_AND_RESET"),
        (FakeGpu(remapped_rows=(3, 1, 1, 0)), "row remapping pending (reset needed)"),
        (FakeGpu(remapped_rows=(3, 1, 0, 1)), "row remapping failed"),
        (FakeGpu(volatile_uncorrected_ecc=2), "2 volatile uncorrected ECC errors"),
        (FakeGpu(retired_pages_pending=True), "retired pages pending (reset needed)"),
        (
            FakeGpu(processes=[(4242, 10 * MIB), (777, 1500 * MIB), (778, 100 * MIB)]),
            "processes not ours hold 1600 MiB (pids 777, 778)",
        ),
        (FakeGpu(volatile_uncorrected_ecc=NvmlError("GPU is lost")), "NVML error: GPU is lost"),
    ],
)
def test_each_fault_fails_with_a_line_a_human_can_act_on(gpu_state, detail):
    got = run([FakeGpu(), gpu_state])
    assert got["gpu:1"] == (Status.FAIL, detail)
    assert got["gpu:0"] == (Status.PASS, "ok")


def test_foreign_memory_within_tolerance_passes():
    got = run([FakeGpu(processes=[(777, 1024 * MIB)])], tolerance=1024)
    assert got["gpu:0"] == (Status.PASS, "ok")


def test_not_supported_is_a_skip_not_a_failure():
    # An Ampere+ GPU answers NotSupported for retired pages; an old driver for the recovery field.
    got = run([FakeGpu(recovery_action=NOT_SUPPORTED, retired_pages_pending=NOT_SUPPORTED)])
    assert got["gpu:0"] == (Status.PASS, "ok (not supported: recovery_action, retired_pages)")
    everything = dict.fromkeys(
        [
            "recovery_action",
            "remapped_rows",
            "volatile_uncorrected_ecc",
            "retired_pages_pending",
            "processes",
        ],
        NOT_SUPPORTED,
    )
    got = run([FakeGpu(**everything)])
    assert got["gpu:0"] == (Status.SKIP, "no health query supported")


def test_several_faults_on_one_gpu_are_all_named():
    got = run([FakeGpu(recovery_action=1, volatile_uncorrected_ecc=1)])
    assert got["gpu:0"] == (Status.FAIL, "recovery action GPU_RESET; 1 volatile uncorrected ECC errors")


# --- wait_for_release -------------------------------------------------------------------


def test_wait_for_release_without_nvml_returns_at_once_skipped():
    try:
        NvmlAdapter.open().close()
    except NvmlUnavailable:
        pass
    else:
        pytest.skip("this machine has NVML")
    ok, why = gpu.wait_for_release([1, 2], timeout=30.0, tolerance_mib=512)
    assert ok is True
    assert why.startswith("skipped: ")


def test_wait_for_release_waits_for_pids_and_then_for_memory():
    gpus = [FakeGpu(processes=[(100, 8000 * MIB), (555, 300 * MIB)], memory_used=8700 * MIB)]

    def evolve(fake: FakeNvml) -> None:
        if fake.polls == 3:  # NVML drops the process before the driver frees its memory
            fake.gpus[0].processes = [(555, 300 * MIB)]
        if fake.polls == 6:
            fake.gpus[0].memory_used = 800 * MIB

    fake = FakeNvml(gpus, on_poll=evolve)
    ok, why = gpu.wait_for_release([100], timeout=10.0, tolerance_mib=256, nvml=fake, poll_interval=0.001)
    assert ok, why
    assert fake.polls == 6
    assert why.startswith("released after ")
    assert not fake.closed  # the caller's adapter stays open


def test_wait_for_release_times_out_naming_the_holder():
    fake = FakeNvml([FakeGpu(), FakeGpu(processes=[(100, 2048 * MIB)], memory_used=2500 * MIB)])
    ok, why = gpu.wait_for_release([100], timeout=0.05, tolerance_mib=256, nvml=fake, poll_interval=0.01)
    assert (ok, why) == (False, "gpu 1: still held after 0.05 s by pid 100 (2048 MiB)")


def test_wait_for_release_times_out_on_memory_not_given_back():
    fake = FakeNvml([FakeGpu(processes=[(100, 2048 * MIB)], memory_used=2500 * MIB)])
    fake.gpus[0].processes = []  # gone from the list, memory still used
    ok, why = gpu.wait_for_release([100], timeout=0.05, tolerance_mib=0, nvml=fake, poll_interval=0.01)
    assert ok  # nothing was attributed to the pid at the start: nothing to wait for

    fake = FakeNvml([FakeGpu(processes=[(100, 2048 * MIB)], memory_used=2500 * MIB)])

    def drop(f: FakeNvml) -> None:
        if f.polls >= 2:
            f.gpus[0].processes = []

    fake.on_poll = drop
    ok, why = gpu.wait_for_release([100], timeout=0.05, tolerance_mib=256, nvml=fake, poll_interval=0.01)
    assert (ok, why) == (False, "gpu 0: 2048 MiB still in use above the start after 0.05 s")


# --- the real adapter's translation of pynvml errors ---------------------------------------


class _FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _fake_pynvml(**functions):
    def raising(code):
        def fn(*args):
            raise _FakeNVMLError(code)

        return fn

    mod = types.SimpleNamespace(
        NVMLError=_FakeNVMLError,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_SUCCESS=0,
        nvmlDeviceGetHandleByIndex=lambda i: f"handle{i}",
        nvmlShutdown=lambda: None,
    )
    for name, value in functions.items():
        setattr(mod, name, raising(value) if isinstance(value, int) else value)
    return mod


def test_adapter_maps_not_supported_and_other_errors():
    adapter = NvmlAdapter(
        _fake_pynvml(
            nvmlDeviceGetRetiredPagesPendingStatus=3,
            nvmlDeviceGetRemappedRows=15,
            nvmlDeviceGetCount=lambda: 8,
        )
    )
    assert adapter.device_count() == 8
    with pytest.raises(NvmlNotSupported):
        adapter.retired_pages_pending(0)
    with pytest.raises(NvmlError):
        adapter.remapped_rows(0)


def test_adapter_reads_the_recovery_action_field_and_its_own_return_code():
    def field(ret, value):
        return [types.SimpleNamespace(nvmlReturn=ret, value=types.SimpleNamespace(uiVal=value))]

    mod = _fake_pynvml()
    mod.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
    mod.nvmlDeviceGetFieldValues = lambda handle, ids: field(0, 2) if ids == [230] else field(3, 0)
    assert NvmlAdapter(mod).recovery_action(0) == 2
    mod.nvmlDeviceGetFieldValues = lambda handle, ids: field(3, 0)
    with pytest.raises(NvmlNotSupported):
        NvmlAdapter(mod).recovery_action(0)


def test_adapter_gives_pci_bus_id_and_uuid_as_text():
    mod = _fake_pynvml(
        nvmlDeviceGetPciInfo=lambda handle: types.SimpleNamespace(busId=b"00000000:1B:00.0"),
        nvmlDeviceGetUUID=lambda handle: "GPU-5e1f",
    )
    adapter = NvmlAdapter(mod)
    assert (adapter.pci_bus_id(0), adapter.uuid(0)) == ("00000000:1B:00.0", "GPU-5e1f")
