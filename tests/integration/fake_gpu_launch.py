"""slurm-ft-launch on a node whose GPUs the test controls. This machine has no GPU and no
driver, so NVML, the hardware boundary, is the one thing replaced: every time the launcher
opens NVML it gets ``tests.support.fake_nvml.FakeNvml`` built from
``$FAKE_NVML_DIR/<node name>.json`` as the file is then (a list of ``FakeGpu`` fields per
GPU; no file: no GPUs), so a test turns a healthy GPU into a failing one mid-run by
replacing the file. The rest is the real launcher."""

import json
import os
import sys
from pathlib import Path

from slurm_ft.health import gpu
from tests.support.fake_nvml import FakeGpu, FakeNvml

_FILE = Path(os.environ["FAKE_NVML_DIR"]) / f"{os.environ.get('SLURMD_NODENAME', 'local')}.json"


def _open() -> FakeNvml:
    try:
        gpus = json.loads(_FILE.read_text())
    except FileNotFoundError:
        raise gpu.NvmlUnavailable("NVML unavailable: no fake GPUs on this node") from None
    return FakeNvml(
        [FakeGpu(**{k: tuple(v) if isinstance(v, list) else v for k, v in g.items()}) for g in gpus]
    )


gpu.NvmlAdapter.open = staticmethod(_open)  # type: ignore[method-assign,assignment]

from slurm_ft.cli.launch import main  # noqa: E402 - after NVML is in place

sys.exit(main())
