"""A standby worker: a fresh interpreter that has already imported what the job's workers
import, waiting to become one rank's worker of the next cycle (README: warm restarts).

Started by the launcher as ``PYTHON -u standby_child.py FD PRELOAD -- SCRIPT ARGS...``
with the interpreter, flags, environment (less the cycle's variables), working directory,
CPU/NUMA placement, session and parent-death signal a cold worker gets. Standard library
only, and never ``from __future__``: the workers' interpreter need not have slurm-ft
installed, and the script is compiled here without inheriting anything of this module.
What ``--preload auto`` preloads is read off the script by ``standby_preload.py``, a
second file of the same kind beside this one, loaded by path.

The conversation on FD (a stream socket to the launcher):

* the standby sends ``R`` + JSON ``{"seconds", "modules"}`` once its preloads are
  imported, or ``F`` + JSON ``{"module", "error"}`` when one failed (and then exits 3:
  half an imported package is not something to run a trainer on);
* the launcher sends one byte ``A`` with three descriptors attached: the worker's stdout
  and stderr, and a memfd holding JSON ``{"argv", "cmdline", "env", "cwd"}``. Then the
  standby becomes the worker: the descriptors replace 1 and 2, the environment and
  directory become the cycle's, its command line becomes a cold worker's (``cmdline``,
  :func:`_show_cmdline`), the stack dump is armed as ``sitecustomize`` arms it in a cold
  worker, and the script runs as ``__main__`` as ``python -u SCRIPT`` would run it;
* the launcher closing the socket instead means "not needed": the standby exits 0.
"""

import atexit
import functools
import importlib
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import types
from types import TracebackType

EXIT_PRELOAD_FAILED = 3
HERE = os.path.abspath(__file__)


def _beside(name: str) -> types.ModuleType:
    """The module in the file ``name``.py beside this one, loaded by path (the workers'
    interpreter need not have slurm-ft installed; nothing is added to ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(
        f"_slurm_ft_{name}", os.path.join(os.path.dirname(HERE), name + ".py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


preloading = _beside("standby_preload")  # what to preload: read off the script, never run


def _set_path0(argv0: str) -> None:
    # This file's own directory was put first; with -P/PYTHONSAFEPATH nothing was.
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = preloading.script_dir(argv0)


def _preload(spec: str, script: str) -> list[str]:
    """Import the preload list; on a failure tell the launcher and exit."""
    if spec == "none":
        return []
    names = preloading.auto_modules(script) if spec == "auto" else [n for n in spec.split(",") if n]
    done: list[str] = []
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # anything a package raises at import
            _send(b"F", {"module": name, "error": f"{type(exc).__name__}: {exc}"})
            os._exit(EXIT_PRELOAD_FAILED)
        done.append(name)
    return done


# ---------------------------------------------------------------- the CPU share

# While a standby imports (1-1.5 s of CPU for torch), the cycle's workers may be starting
# too; on a node with few cores it would take their CPU. A standby is a session of its own,
# and where the kernel groups a session's threads for the scheduler (autogroups, on by
# default) the group's nice sets its share against the workers' sessions: 19 gives it
# about 1.5 % of a contended core. Unlike a process's nice, an autogroup's can be set back
# without privilege, so it is lowered for the imports only and restored before the
# standby says it is ready: the worker it becomes runs at the share a cold one has. At
# most LOW_SHARE_MAX_S, though: the workers' start-up is over by then, and where they keep
# every core busy (CPU training, a shared node) a standby at 1.5 % would never be ready.
# (A process's or a thread's own nice cannot be raised again without CAP_SYS_NICE, and
# threads that torch starts while importing inherit it: where autogroups are off, a
# standby keeps the normal share.)
AUTOGROUP = "/proc/self/autogroup"
LOW_NICE = 19
# The kernel takes one autogroup change in 100 ms from unprivileged processes, machine-wide.
AUTOGROUP_RETRY_S = 0.11
AUTOGROUP_TRIES = 50
LOW_SHARE_MAX_S = 10.0


def _autogroup_nice() -> int | None:
    """This session's autogroup nice; None where autogroups do not share out the CPU."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", "rb") as fh:
            if fh.read().strip() != b"1":
                return None
        with open(AUTOGROUP, "rb") as fh:
            return int(fh.read().rsplit(b"nice", 1)[1])  # "/autogroup-406 nice 0"
    except (OSError, ValueError, IndexError):
        return None


class _LowShare:
    """The lowered share of one standby's imports: back at the end of the imports, or
    after :data:`LOW_SHARE_MAX_S` on a timer thread, whichever comes first (the thread is
    gone before the script runs: a warm worker has a cold one's threads)."""

    def __init__(self, was: int) -> None:
        self.was = was
        self.back = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(LOW_SHARE_MAX_S, self._restore)
        self.timer.daemon = True

    @classmethod
    def begin(cls) -> "_LowShare | None":
        was = _autogroup_nice()
        if was is None or was >= LOW_NICE or not _set_autogroup_nice(LOW_NICE):
            return None
        low = cls(was)
        low.timer.start()
        return low

    def _restore(self) -> bool:
        with self.lock:
            self.back = self.back or _set_autogroup_nice(self.was)
            return self.back

    def end(self) -> bool:
        """True once the share is back."""
        self.timer.cancel()
        self.timer.join()
        return self._restore()


def _set_autogroup_nice(value: int) -> bool:
    for _ in range(AUTOGROUP_TRIES):
        try:
            fd = os.open(AUTOGROUP, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            os.write(fd, str(value).encode())
            return True
        except BlockingIOError:  # another change within the kernel's 100 ms
            time.sleep(AUTOGROUP_RETRY_S)
        except OSError:
            return False
        finally:
            os.close(fd)
    return False


# ---------------------------------------------------------------- the conversation


class _Control:
    sock: socket.socket | None = None


def _send(kind: bytes, body: dict[str, object]) -> None:
    assert _Control.sock is not None
    try:
        _Control.sock.sendall(kind + json.dumps(body).encode())
    except OSError:
        pass


def _wait_for_activation() -> tuple[int, int, dict[str, object]] | None:
    """(stdout fd, stderr fd, payload) of the activation, or None when not needed."""
    assert _Control.sock is not None
    try:
        msg, fds, _flags, _addr = socket.recv_fds(_Control.sock, 1, 3)
    except OSError:
        return None
    if msg != b"A" or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    out, err, payload = fds
    with os.fdopen(payload, "rb") as fh:
        body = json.loads(fh.read())
    return out, err, body


def _become(out: int, err: int, body: dict[str, object]) -> None:
    """The worker's descriptors, environment, directory and stack dump."""
    assert _Control.sock is not None
    _Control.sock.close()
    for fd, target in ((out, 1), (err, 2)):
        os.dup2(fd, target)
    for fd in {out, err} - {1, 2}:
        os.close(fd)
    cwd, env, argv = body.get("cwd"), body["env"], body["argv"]
    assert isinstance(env, dict) and isinstance(argv, list)
    if isinstance(cwd, str) and cwd:
        os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    try:
        import _slurm_ft_stacks  # type: ignore[import-not-found]  # on PYTHONPATH (inject/)
    except ImportError:
        pass
    else:
        _slurm_ft_stacks.arm()
    sys.argv[:] = [str(a) for a in argv]
    cmdline = body.get("cmdline")
    if isinstance(cmdline, list) and cmdline:
        _show_cmdline([str(a) for a in cmdline])


# ---------------------------------------------------------------- the command line


def _argv_area() -> tuple[int, int] | None:
    """Where the kernel keeps this process's command line (``/proc/self/stat``'s
    ``arg_start`` and ``arg_end``, fields 48 and 49), or None."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            raw = fh.read()
        fields = raw[raw.rindex(b")") + 2 :].split()  # from field 3 on: comm may hold spaces
        return int(fields[48 - 3]), int(fields[49 - 3])
    except (OSError, ValueError, IndexError):
        return None


def _show_cmdline(cmdline: list[str]) -> bool:
    """Make ``/proc/self/cmdline`` (what ``ps``, ``pgrep -f`` and accounting tools read)
    a cold worker's, ``python -u SCRIPT ARGS``, by writing it over the standby's own
    command line in place; the rest of that area becomes NUL bytes. The standby's command
    line is the cold one with this file's path, the descriptor, the preload and ``--``
    between the flags and the script, so the cold one always fits; the first two words
    (the interpreter and ``-u``) are the same bytes, so glibc's pointer to argv[0]
    (``program_invocation_name``) still reads the same. Python copied its argv at start
    and never reads this memory again. ``sys.orig_argv`` is made to say the same.

    Only the command line: the kernel's ``/proc/self/environ`` stays the environment the
    standby was started with (moving it takes ``PR_SET_MM_MAP``, which also resets the
    heap's break and so races with any thread's ``malloc``; writing over it in place
    would change strings that libraries may still point into). False when nothing was
    written (no ``/proc``, or it does not fit)."""
    area = _argv_area()
    data = b"".join(os.fsencode(word) + b"\0" for word in cmdline)
    if area is None or len(data) > area[1] - area[0]:
        return False
    try:
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(area[0])
            mem.write(data.ljust(area[1] - area[0], b"\0"))
    except OSError:
        return False
    try:
        sys.orig_argv[:] = cmdline
    except (AttributeError, TypeError):
        pass
    return True


# ---------------------------------------------------------------- torch's gloo teardown


# Process groups the script destroyed, kept until it has run (``_keep_destroyed_groups``).
_DESTROYED_GROUPS: list[object] = []


def _keep_destroyed_groups() -> None:
    """Wrap ``torch.distributed.destroy_process_group`` (when the preloads imported it) so
    that it keeps the groups it destroys until the script has run.

    A DDP trainer that frees its model after ``destroy_process_group()`` leaves DDP's
    reducer as the group's last owner; freeing the reducer destroys a gloo group while
    holding the GIL, and a gloo thread that still holds the last collective's tensor waits
    for that GIL: the rank hangs for ever after it finished (pytorch#56297; a cold worker
    of the same trainer more often dies of SIGABRT at interpreter exit, the same race).
    The unmodified PyTorch DDP tutorial does exactly this, and its warm workers hung at
    exit in most restarted cycles. Kept here, the group outlives the reducer; released
    after the script, its own binding destroys it with the GIL let go."""
    dist = sys.modules.get("torch.distributed")
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    original = getattr(dist, "destroy_process_group", None)
    world = getattr(c10d, "_world", None)
    if dist is None or c10d is None or original is None or world is None or not hasattr(world, "pg_map"):
        return

    @functools.wraps(original)
    def destroy_process_group(group=None):  # type: ignore[no-untyped-def]
        try:
            _DESTROYED_GROUPS.extend(list(world.pg_map) if group is None else [group])
        except Exception:  # a torch whose registry differs: destroy as before
            pass
        return original(group)

    for module in (dist, c10d):
        if getattr(module, "destroy_process_group", None) is original:
            module.destroy_process_group = destroy_process_group  # type: ignore[attr-defined]


def _release_destroyed_groups() -> None:
    """After the script: the reducers go first (a collection), then the groups."""
    if _DESTROYED_GROUPS:
        import gc

        gc.collect()
        _DESTROYED_GROUPS.clear()


# ---------------------------------------------------------------- running the script


class _Ended:
    by_interrupt = False


def _exit_by_sigint() -> None:
    """Registered first, so it runs last at exit: a KeyboardInterrupt that ended the script
    ends the process by SIGINT, as it ends a cold ``python`` (after threads and atexit)."""
    if _Ended.by_interrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def _without_own_frames(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_frame.f_code.co_filename == HERE:
        tb = tb.tb_next
    return tb


def _run_script(argv0: str) -> None:
    """``argv0`` as ``__main__``, with the module attributes ``python -u SCRIPT`` gives."""
    import builtins
    import types
    from importlib.machinery import SourceFileLoader

    path = argv0 if os.path.isabs(argv0) else os.path.join(os.getcwd(), argv0)
    _set_path0(argv0)
    main = types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = SourceFileLoader("__main__", path)
    with open(argv0, "rb") as fh:
        source = fh.read()
    code = compile(source, path, "exec", dont_inherit=True)
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        _release_destroyed_groups()


def main() -> None:
    fd, preload, script_argv = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
    _Control.sock = socket.socket(fileno=fd)
    sys.argv[:] = script_argv  # what a module reading sys.argv at import sees in the worker
    _set_path0(script_argv[0])
    start = time.monotonic()
    low = _LowShare.begin()
    modules = _preload(preload, script_argv[0])
    if low is not None and not low.end():
        _send(
            b"F", {"module": "(the CPU share)", "error": f"cannot set the autogroup's nice back to {low.was}"}
        )
        os._exit(EXIT_PRELOAD_FAILED)
    _send(b"R", {"seconds": round(time.monotonic() - start, 3), "modules": modules})
    activation = _wait_for_activation()
    if activation is None:
        os._exit(0)
    _become(*activation)
    atexit.register(_exit_by_sigint)
    _keep_destroyed_groups()
    try:
        _run_script(sys.argv[0])
    except SystemExit:
        raise
    except BaseException as exc:  # the script's uncaught exception, shown as Python shows it
        tb = _without_own_frames(exc.__traceback__)
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        _Ended.by_interrupt = isinstance(exc, KeyboardInterrupt)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
