"""The file-system side of :mod:`._persistence`: a model folder replaced as a whole, read as one.

Saving (:func:`replace_folder`) never writes into the folder it replaces. It writes every file
into a new hidden folder beside it (``.<name>.saving-<random>``, in the same parent, so that
renames stay on one file system), flushes each file and then that folder to disk (``fsync``),
and only then puts it in place of the old one:

- on Linux, one ``renameat2(..., RENAME_EXCHANGE)`` swaps the two folders: at every instant,
  a crash included, the path names a complete folder, the old model's or the new one's;
- where the system or the file system cannot exchange two folders, the old folder is renamed
  aside (``.<name>.replaced-<random>``) and the new one renamed into its place. For the time
  between those two renames the path names no folder (a concurrent load waits for it, see
  below); a crash exactly there leaves the old model whole in the ``.replaced-`` folder.

A failure before the swap (a full disk, a read-only parent, an exception in any write, an
interrupt) removes the new folder and leaves the old one untouched. The folder swapped out
is removed afterwards by its model file names only, then ``rmdir``: a file that is not the
model's is never deleted (:func:`replace_folder` refuses a folder that holds one, and one added
during the save stays in the swapped-out folder, with a warning). A save that was killed
leaves at most a hidden ``.saving-`` or ``.replaced-`` folder beside the model, never a
half-written model in its place.

Loading (:func:`read_consistent`) reads each file's bytes once, through one open handle of the
folder (``dir_fd``), so every file comes from the same folder even if it is swapped meanwhile;
the caller checks its digests on those bytes and parses the same bytes. A read that raced a
swap (the folder it opened was replaced or removed meanwhile, so a file vanished or does not
match) is retried, a bounded number of times. Only regular files are read (a symlink to one
is followed): a FIFO, a device or a folder is refused before it is opened for reading, and
checked again on the open handle.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import os
import secrets
import stat
import sys
import time
import warnings
import zipfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ...exceptions import ModelFileError

__all__ = ["FolderReader", "read_consistent", "read_npz", "read_record", "record_digest", "replace_folder",
           "write_file"]

T = TypeVar("T")

#: Reads of a folder that keeps being replaced while it is read, before giving up.
ATTEMPTS = 20

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_DIR_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd


# ---------------------------------------------------------------------------- saving
def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file at ``path`` and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY | _O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_folder(path: str | os.PathLike, files: Mapping[str, bytes], owned: Collection[str]) -> None:
    """Make ``path`` a folder holding exactly ``files`` (name -> bytes), replacing what is there
    as a whole: afterwards it holds the new files, or, if anything failed, the old ones.

    ``owned`` names every file a folder of this kind may hold. A folder at ``path`` holding
    anything else is refused (:class:`FileExistsError`): replacing it would delete it. Where
    ``path`` is a symlink, the folder it points to is replaced and the link kept. A name may
    hold one ``/``: the file then lies in a subfolder of that name (a part saved as a folder).
    """
    target = Path(os.path.realpath(path))
    old = _check_replaceable(target, owned)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _new_sibling(target, "saving")
    try:
        if old is not None:
            os.chmod(staging, stat.S_IMODE(old.st_mode))  # the folder keeps its permissions
        for name, data in files.items():
            _check_name(name)
            if "/" in name:  # a part saved as a folder of its own (a whole model's classifier)
                (staging / name).parent.mkdir(exist_ok=True)
            write_file(staging / name, data)
        for sub in sorted({name.split("/")[0] for name in files if "/" in name}):
            _fsync_folder(staging / sub)
        _fsync_folder(staging)
        swapped_out = _swap_into_place(staging, target, exists=old is not None)
    except BaseException:  # an interrupt too: never leave the staging folder behind
        _remove_model_folder(staging, owned, quiet=True)
        raise
    _fsync_folder(target.parent)
    if swapped_out is not None:
        _remove_model_folder(swapped_out, owned)


def _check_replaceable(target: Path, owned: Collection[str]) -> os.stat_result | None:
    """The existing folder's ``stat`` (``None``: nothing there), or the error saying why it
    cannot be replaced."""
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        raise FileExistsError(errno.EEXIST, "exists and is not a folder; save the model to a folder", str(target))
    top = {name.split("/")[0] for name in owned}
    foreign = sorted(set(os.listdir(target)) - top)
    for sub in sorted(top - set(owned)):  # the subfolders: what they may hold
        inside = {name.split("/", 1)[1] for name in owned if name.startswith(sub + "/")}
        if os.path.isdir(target / sub) and not os.path.islink(target / sub):
            foreign += [f"{sub}/{name}" for name in sorted(set(os.listdir(target / sub)) - inside)]
        elif os.path.lexists(target / sub):
            foreign.append(sub)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f", ... ({len(foreign)} in all)" if len(foreign) > 5 else "")
        raise FileExistsError(
            errno.EEXIST,
            f"holds files that are not a saved model's ({shown}); saving replaces the whole folder, which would "
            "delete them: save into a new or empty folder, or move them out",
            str(target),
        )
    return info


def _check_name(name: str) -> None:
    """A file name of a model folder: plain names, at most one subfolder deep, nothing that
    leaves the folder."""
    parts = name.split("/")
    if len(parts) > 2 or any(part in ("", ".", "..") or os.sep in part or (os.altsep and os.altsep in part)
                             for part in parts):
        raise ValueError(f"{name!r} is not a file name of a model folder")


def _new_sibling(target: Path, purpose: str) -> Path:
    """A new empty hidden folder beside ``target`` (created with the process's umask)."""
    for _ in range(16):
        sibling = target.parent / f".{target.name}.{purpose}-{secrets.token_hex(4)}"
        try:
            os.mkdir(sibling, 0o777)
        except FileExistsError:
            continue
        return sibling
    raise FileExistsError(errno.EEXIST, "cannot create a new folder beside the model", str(target))


def _swap_into_place(staging: Path, target: Path, exists: bool) -> Path | None:
    """Put ``staging`` at ``target``; the folder it replaced, now under a hidden name, or ``None``."""
    if not exists:
        os.rename(staging, target)  # an error if a folder appeared there meanwhile: nothing is replaced
        return None
    if _exchange(staging, target):
        return staging
    aside = target.parent / f".{target.name}.replaced-{secrets.token_hex(4)}"
    os.rename(target, aside)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(aside, target)
        raise
    return aside


@functools.cache
def _renameat2() -> Any:
    """glibc's ``renameat2`` (Linux 3.15+), or ``None`` where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders atomically; ``False`` where the system or the file system cannot."""
    function = _renameat2()
    if function is None:
        return False
    import ctypes

    at_fdcwd, rename_exchange = -100, 2
    if function(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(b))


def _fsync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk (POSIX; a file system that cannot is left as it is)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_model_folder(folder: Path, owned: Collection[str], quiet: bool = False) -> None:
    """Remove a swapped-out or unfinished model folder: its model files by name, then the folder
    (which fails, with a warning, if anything else is in it)."""
    try:
        for name in sorted(owned, key=lambda n: -n.count("/")):  # a subfolder's files first
            try:
                os.unlink(folder / name)
            except FileNotFoundError:
                pass
            except IsADirectoryError:  # a subfolder (its files were removed above)
                os.rmdir(folder / name)
        for sub in sorted({name.split("/")[0] for name in owned if "/" in name} - set(owned)):
            try:
                os.rmdir(folder / sub)
            except FileNotFoundError:
                pass
        os.rmdir(folder)
    except OSError as exc:
        if not quiet:
            warnings.warn(f"the replaced model's folder {folder} could not be removed ({exc}); the new model is in "
                          "place, remove that folder by hand", RuntimeWarning, stacklevel=3)


# ---------------------------------------------------------------------------- loading
class FolderReader:
    """Regular files of one folder, each read whole, all through one handle of the folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        if _DIR_FD:
            self._fd: int | None = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
            self._identity = _identity(os.fstat(self._fd))
        else:
            self._fd = None
            self._identity = _identity(os.stat(folder))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def replaced(self) -> bool:
        """Whether the folder at the path is no longer the one this reader opened."""
        if self._fd is not None and os.fstat(self._fd).st_nlink == 0:
            return True  # removed
        try:
            return _identity(os.stat(self.folder)) != self._identity
        except FileNotFoundError:
            return True

    def read(self, name: str) -> bytes:
        """The bytes of the regular file ``name``; :class:`FileNotFoundError` where there is none,
        :class:`ModelFileError` for anything but a regular file (a FIFO, a device, a folder, also
        behind a symlink), refused before it is opened for reading."""
        where = self.folder / name
        kw = {"dir_fd": self._fd} if self._fd is not None else {}
        source = name if self._fd is not None else where
        _check_regular(where, os.stat(source, **kw))
        # O_NONBLOCK: should a FIFO replace the file after the check, opening it cannot wait for a writer.
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | _O_BINARY | _O_CLOEXEC
        fd = os.open(source, flags, **kw)
        try:
            size = _check_regular(where, os.fstat(fd)).st_size
            with io.FileIO(fd, "rb", closefd=False) as f:
                data = f.read(size)
                while len(data) < size:  # one read can return less than asked for (very large files)
                    more = f.read(size - len(data))
                    if not more:
                        break
                    data += more
                if len(data) != size or f.read(1):
                    raise ModelFileError(f"{where} changed size while it was read: something writes into it")
        finally:
            os.close(fd)
        return data


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _check_regular(where: Path, info: os.stat_result) -> os.stat_result:
    if not stat.S_ISREG(info.st_mode):
        kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
        kind = next((text for test, text in kinds if test(info.st_mode)), "not a file")
        link = " behind a symlink" if os.path.islink(where) else ""
        raise ModelFileError(f"{where} is not a regular file (it is {kind}{link}); refusing to read it")
    return info


def read_consistent(folder: Path, read: Callable[[FolderReader], T], attempts: int | None = None) -> T:
    """``read(reader)`` of one state of ``folder``: retried while the folder is replaced under it.

    ``read`` reads its files through the reader and checks that they belong together (raising
    :class:`FileNotFoundError` or a :class:`ValueError` where not). When that fails and the
    folder the reader opened is no longer the one at the path (a save swapped it meanwhile),
    the read starts again, at most ``attempts`` times (default :data:`ATTEMPTS`); otherwise its
    error is raised at once.
    """
    attempts = ATTEMPTS if attempts is None else attempts
    last: BaseException | None = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(0.001 * 2 ** attempt, 0.05))
        try:
            reader = FolderReader(folder)
        except FileNotFoundError:
            if _being_replaced(folder) and attempt + 1 < attempts:
                continue  # between the two renames of a save that could not exchange the folders
            raise
        try:
            return read(reader)
        except (OSError, ValueError) as exc:
            if not reader.replaced():
                raise
            last = exc
        finally:
            reader.close()
    raise ModelFileError(
        f"{folder} was replaced while it was read, {attempts} times in a row: another process keeps saving into "
        f"it; load it again when it is done (last error: {last})"
    ) from last


def _being_replaced(folder: Path) -> bool:
    """Whether a save beside ``folder`` has renamed the old folder aside (see the module's docstring)."""
    prefix = f".{folder.name}.replaced-"
    try:
        return any(entry.startswith(prefix) for entry in os.listdir(folder.parent or "."))
    except OSError:
        return False


def read_npz(data: bytes, where: Path, max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive held in ``data``, or a :class:`ModelFileError` naming
    ``where`` and the damage: not an archive (a bare ``.npy`` array, other bytes), a damaged
    archive or member, an object array (which only unpickling could read: it is refused
    without being read), or a member declaring more than ``max_bytes`` (refused before it is
    allocated)."""
    if data[:6] == b"\x93NUMPY":
        raise ModelFileError(f"{where} holds a single .npy array, not an .npz archive of arrays")
    if data[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise ModelFileError(f"{where} is not an .npz archive (it starts with {data[:8]!r})")
    arrays = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                name = info.filename
                if not name.endswith(".npy"):
                    raise ModelFileError(f"{where} holds {name!r}, which is not a .npy array")
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version not in ((1, 0), (2, 0)):
                        raise ModelFileError(f"{where}: {name} is in .npy format {version}, which is not written here")
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(member)
                    if dtype.hasobject:
                        raise ModelFileError(f"{where}: {name} is an array of Python objects, which no saved model "
                                             "holds (reading one would mean unpickling it); refusing it")
                    if int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > max_bytes:
                        raise ModelFileError(f"{where}: {name} declares shape {shape} of {dtype}, larger than "
                                             "any array of this model")
                with archive.open(info) as member:
                    arrays[name[:-4]] = np.lib.format.read_array(member, allow_pickle=False)
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile, zlib and the .npy reader raise many kinds on damage
        raise ModelFileError(f"{where} is a damaged .npz archive ({type(exc).__name__}: {exc})") from None
    return arrays


# ---------------------------------------------------------------------------- a folder's JSON record
def record_digest(record: Mapping[str, Any]) -> str:
    """SHA-256 of a record's content (every field but ``digest``), in a canonical JSON form."""
    content = {k: v for k, v in record.items() if k != "digest"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_record(folder: Path, reader: Any, name: str, fmt: str, newest: int, what: str, missing: str
                ) -> dict[str, Any]:
    """The JSON record ``name`` of a saved folder, checked: valid JSON, a dict of format ``fmt``,
    a format version this package reads (at most ``newest``), its content matching its digest.

    ``what`` names the saved kind in errors ("a model saved by save_model"); ``missing`` says,
    when the file is absent, what the folder is not and what loads it instead. Every failure is
    a :class:`~hiclass_parallel.exceptions.ModelFileError` naming the file, except a missing
    file (``FileNotFoundError``)."""
    try:
        raw = reader.read(name)
    except FileNotFoundError:
        raise FileNotFoundError(2, f"no {name} in the folder: {missing}", str(folder)) from None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelFileError(f"{folder / name} is not valid JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(record, dict) or record.get("format") != fmt:
        raise ModelFileError(f"{folder / name} is not {what}")
    version = record.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ModelFileError(f"{folder / name}: format_version={version!r} is not a format version")
    if version > newest:
        raise ModelFileError(f"{folder} was saved in format {version} of {name}, newer than this version reads "
                             f"({newest}); upgrade hiclass_parallel")
    if record.get("digest") != record_digest(record):
        raise ModelFileError(f"{folder / name} was modified after it was saved (its content does not match its "
                             "digest); save the model again")
    return record
