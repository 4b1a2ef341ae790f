"""Write an output beside its target, then rename it into place: the one way rmqdump writes a result.

Every command that writes (rebuild, export, sql --out, report --out) goes
through `publishing`: the target is checked first (never inside a store,
never over something without --force), the work is written into a hidden
temporary entry in the target's directory, and only a complete result is
renamed over the target, with SIGINT/SIGTERM held during the rename; unless a
command's --no-sync says otherwise, every file and directory of it is
fsynced first and the parent after (a published output survives a crash
with its bytes, as pg_dump's and rebuild's files do). An
interrupted run leaves the target absent or as it was; temporaries left by a
killed run are removed by the next run that writes the same target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterable, Iterator

from rmqdump.common.problems import InputError

# Stable codes: the target is not a safe place to write (exit 2).
OUTPUT_INSIDE_STORE = "output_inside_store"
STORE_INSIDE_OUTPUT = "store_inside_output"
OUTPUT_EXISTS = "output_exists"
OUTPUT_NOT_DIRECTORY = "output_not_directory"
OUTPUT_IS_DIRECTORY = "output_is_directory"
OUTPUT_PARENT_NOT_DIRECTORY = "output_parent_not_directory"
OUTPUT_NO_SPACE = "output_no_space"  # the file system ran out of room (or quota) while the output was written
OUTPUT_UNWRITABLE = "output_unwritable"  # this user may not create files where the output goes (or the file system is read-only)
OUTPUT_NOT_SYNCED = "output_not_synced"  # the disk refused a file's fsync (EIO): its bytes may not be there, so nothing is published

NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # the errnos of a write the file system has no room for
NOT_ALLOWED = (errno.EACCES, errno.EPERM, errno.EROFS)  # the errnos of a write this user may not make there

KINDS = ("dir", "file")
TMP_MARK = ".rmqdump-tmp-"  # in every temporary's name: `.{target name}{TMP_MARK}{pid}-{ms}`


def _real(p: str) -> str:
    return os.path.realpath(os.path.abspath(p))


def _inside(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def refuse_inside_stores(path: str, stores: Iterable[str], what: str = "the store is evidence, never written; write elsewhere") -> None:
    """InputError(output_inside_store) when `path` (links resolved) is a store or lies inside one."""
    real = _real(path)
    for store in stores:
        if _inside(real, _real(store)):
            raise InputError(OUTPUT_INSIDE_STORE, path, f"is inside the store {store}: {what}")


def check_target(target: str, *, force: bool, stores: Iterable[str] = (), kind: str = "dir") -> str:
    """The absolute target path; InputError when writing it is not safe.

    An absent path (or, for a directory, an empty directory) is written; anything else needs `force`.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    out = os.path.abspath(target)
    stores = list(stores)
    refuse_inside_stores(target, stores)
    for store in stores:
        if _inside(_real(store), _real(target)):
            raise InputError(STORE_INSIDE_OUTPUT, target, f"contains the store {store}: it would be replaced")
    if not os.path.lexists(out):
        parent = os.path.dirname(out)
        while not os.path.lexists(parent):  # the nearest existing ancestor must be a directory to create it in
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise InputError(OUTPUT_PARENT_NOT_DIRECTORY, target, f"{parent} is not a directory: nothing can be created under it")
        _writable(target, parent)
        return out
    is_dir = os.path.isdir(out) and not os.path.islink(out)
    if kind == "dir" and not is_dir:
        raise InputError(OUTPUT_NOT_DIRECTORY, target, "exists and is not a directory")
    if kind == "file" and is_dir:
        raise InputError(OUTPUT_IS_DIRECTORY, target, "is a directory; name a file")
    if (not is_dir or os.listdir(out)) and not force:
        raise InputError(OUTPUT_EXISTS, target, "already exists; --force replaces it")
    _writable(target, os.path.dirname(out))
    return out


def _writable(target: str, parent: str) -> None:
    """InputError(output_unwritable) before any work when this user may not create the output's temporary in `parent`."""
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(OUTPUT_UNWRITABLE, target, f"{parent}: {os.strerror(errno.EACCES)}: nothing can be written there")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _clean_stale(parent: str, base: str) -> None:
    """Temporaries of this target left by a run that was killed (its process is gone)."""
    prefix = f".{base}{TMP_MARK}"
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            if name.startswith(prefix):
                pid = name[len(prefix) :].split("-")[0]
                if pid.isdigit() and not _pid_alive(int(pid)):
                    _remove(os.path.join(parent, name))


def fsync_path(path: str, *, strict: bool = True) -> None:
    """A file's bytes, or a directory's names, on the disk. strict: a failure is raised (after a failed fsync a
    file's pages may be gone: nothing is published); else let go (some file systems refuse to fsync a directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        if strict:
            raise OSError(e.errno, e.strerror, path) from e  # fsync's own error names no file


def _fsync_tree(top: str) -> None:
    """Every file under `top`, then every directory from the deepest up, on the disk before the rename shows them: a
    directory renamed into place while its files' pages were still only in memory can come back from a crash with
    its files empty. Files a writer already synced (or started writing back, common.writeback) cost little here."""
    if not os.path.isdir(top) or os.path.islink(top):
        fsync_path(top)
        return
    for root, _dirs, files in os.walk(top, topdown=False):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                fsync_path(path)
        fsync_path(root, strict=False)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT/SIGTERM wait while the result is renamed into place; one that came meanwhile is then dropped (the work is done)."""
    held = {signal.SIGINT, signal.SIGTERM}
    main = threading.current_thread() is threading.main_thread()
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        if main:
            with contextlib.suppress(KeyboardInterrupt):  # pthread_sigmask runs the pending handlers itself
                signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _rename_into_place(tmp: str, out: str) -> None:
    """Put the finished entry in place; a replaced one (only with force) is moved aside first, then removed."""
    old = None
    if os.path.lexists(out):
        if os.path.isdir(out) and not os.path.islink(out) and not os.listdir(out):
            os.rmdir(out)
        else:
            old = f"{tmp}.old-{uuid.uuid4().hex[:8]}"
            os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        _remove(old)


@contextlib.contextmanager
def publishing(target: str, *, force: bool, stores: Iterable[str] = (), kind: str = "dir", sync: bool = True) -> Iterator[str]:
    """Check `target`, yield a temporary path beside it (an empty directory, or a file path not yet
    created), and rename it over `target` when the block ends without an error; on an error (or an
    interrupt) the temporary is removed and `target` is left as it was.
    """
    out = check_target(target, force=force, stores=stores, kind=kind)
    parent, base = os.path.dirname(out), os.path.basename(out)
    os.makedirs(parent, exist_ok=True)
    _clean_stale(parent, base)
    tmp = os.path.join(parent, f".{base}{TMP_MARK}{os.getpid()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}")
    try:
        if kind == "dir":
            os.mkdir(tmp)
        yield tmp
        if not os.path.lexists(tmp):
            raise FileNotFoundError(f"nothing was written to {tmp}")
        if sync:
            try:
                _fsync_tree(tmp)
            except OSError as e:
                if e.errno in NO_ROOM or e.errno in NOT_ALLOWED:  # said below, as for any write
                    raise
                raise InputError(OUTPUT_NOT_SYNCED, out, f"{e.strerror or e} while {e.filename} was put on the disk: nothing was published") from e
        with _signals_held():
            _rename_into_place(tmp, out)
            if sync:
                fsync_path(parent, strict=False)
    except BaseException as e:
        _remove(tmp)
        if isinstance(e, OSError) and e.errno in NO_ROOM:
            raise InputError(OUTPUT_NO_SPACE, out, f"{os.strerror(e.errno)} while writing it: nothing was published (the partial output was removed)") from e
        if isinstance(e, OSError) and e.errno in NOT_ALLOWED and _inside(_real(e.filename or ""), _real(parent)):
            raise InputError(OUTPUT_UNWRITABLE, out, f"{os.strerror(e.errno)} while writing it: nothing was published") from e
        raise
