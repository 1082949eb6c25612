# shellcheck shell=bash
# Shared by scripts/test and scripts/demo: Debian packages (as root) and the Python venv.
# Expects ROOT (the checkout) and a log function; sets VENV.

if [ "$(id -u)" = 0 ]; then
  VENV="${SLURM_FT_VENV:-/opt/slurm-ft/venv}"
else
  VENV="${SLURM_FT_VENV:-$ROOT/.venv}"
fi

# apt_install demo|test: the tests also need chromium (it renders the report's SVG) and
# valgrind (the benchmarks' instruction counts).
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 0
  local missing=()
  if [ "$1" = test ]; then
    command -v chromium >/dev/null || missing+=(chromium)
    command -v valgrind >/dev/null || missing+=(valgrind)
  fi
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  command -v munged >/dev/null || missing+=(munge)
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  command -v ip >/dev/null || missing+=(iproute2)
  # FUSE: the tests mount a file system that stops answering (a dead network mount's behaviour).
  command -v fusermount >/dev/null || missing+=(fuse)
  [ -e /usr/lib/x86_64-linux-gnu/libfuse.so.2 ] || ldconfig -p 2>/dev/null | grep -q 'libfuse\.so\.2' || missing+=(libfuse2)
  /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  # No systemd: keep package scripts from starting services; the tests start their own.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python_for_venv() {
  # Debian's python3 lives where every user can run it; jobs of the plain test user need that.
  if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else command -v python3; fi
}

setup_venv() {
  if [ "${SLURM_FT_SKIP_INSTALL:-0}" = 1 ] && [ -x "$VENV/bin/python" ]; then return; fi
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$(python_for_venv)" -m venv "$VENV"
  fi
  # The CPU wheel of torch: the dev/CI pin. Users on GPU clusters keep their own torch.
  # numpy too: without it torch prints "Failed to initialize NumPy" in every worker.
  "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.13.0 numpy 2>&1 | grep -v 'is ignored' || true
  # Editable when a plain user can read this checkout (jobs import it); else a real install.
  # "compat": a plain path in a .pth file. setuptools' default editable mode installs an
  # import hook instead, which costs every interpreter start ~8 ms (the launcher's and
  # each worker's: a tenth of a trivial launch); a user's wheel install has neither.
  local mode=(-e)
  local editable=(--config-settings editable_mode=compat)
  if [ "$(id -u)" = 0 ] && ! runuser -u nobody -- test -r "$ROOT/slurm_ft/__init__.py" 2>/dev/null; then
    mode=()
    editable=()
  fi
  "$VENV/bin/pip" install -q --disable-pip-version-check "${editable[@]}" "${mode[@]}" "${ROOT}[test]" 2>&1 \
    | grep -v 'is ignored' || true
  "$VENV/bin/python" -c 'import slurm_ft, torch, numpy, yaml, rich, pynvml, pytest, xdist, hypothesis, fuse, mkdocs, material' \
    || { log "the venv $VENV is incomplete"; exit 1; }
}

