"""Saving replaces a model folder atomically; loading reads one state of it, only from regular files.

A failed save leaves the old model loadable; a load racing a save gets the old model or the new
one, never a mix or a raw ``EOFError``/``BadZipFile``; a FIFO or a symlink to a device is refused
before it is read.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="saving without pickle needs safetensors (the 'persist' extra)")

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier, ModelFileError, load_classifier, save_classifier
from hiclass_parallel.estimators.io import _model_folder

pytestmark = pytest.mark.scale_out


@pytest.fixture(scope="module")
def models():
    """``(X, A, B)``: two fitted models of the same tree that answer differently; A has class
    prototypes (``prototypes.npz``), B has none."""
    X, y, tree = make_hierarchical_classification(n_samples=150, n_features=6, branching=3, depth=2, random_state=0)
    a = HierarchicalClassifier(tree, max_epochs=1, random_state=0, module__hidden_units=8).fit(X, y)
    b = HierarchicalClassifier(tree, max_epochs=3, random_state=1, module__hidden_units=8, prototypes=None).fit(X, y)
    assert a.answer_.term("prototypes") is not None and b.answer_.term("prototypes") is None
    assert (a.predict(X) != b.predict(X)).any()
    return X, a, b


@pytest.fixture(params=["exchange", "two renames"])
def swap(request, monkeypatch):
    """Both ways a save puts its folder in place: one atomic exchange (Linux), or, where the
    system cannot, renaming the old folder aside and the new one into its place."""
    if request.param == "two renames":
        monkeypatch.setattr(_model_folder, "_exchange", lambda a, b: False)
    elif _model_folder._renameat2() is None:
        pytest.skip("no renameat2 here")
    return request.param


def _same(clf, model, X) -> bool:
    return bool((clf.predict(X) == model.predict(X)).all())


def _leftovers(parent) -> list[str]:
    return sorted(name for name in os.listdir(parent) if name.startswith("."))


# ---------------------------------------------------------------------------- failed saves
@pytest.mark.parametrize("failing", ["config.json", "weights.safetensors"])
def test_a_failed_write_leaves_the_old_model(tmp_path, models, monkeypatch, failing):
    """The reported loss: the last write (config.json) failing left B's weights beside A's
    config, and neither model loaded."""
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    before = sorted(os.listdir(folder))
    write = _model_folder.write_file

    def full_disk(path, data):
        if path.name == failing:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(path, data)

    monkeypatch.setattr(_model_folder, "write_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_classifier(b, folder)
    assert sorted(os.listdir(folder)) == before and _leftovers(tmp_path) == []
    assert _same(load_classifier(folder), a, X)
    monkeypatch.undo()
    assert _same(load_classifier(save_classifier(b, folder)), b, X)  # and a later save still works


def test_an_interrupt_mid_save_leaves_the_old_model(tmp_path, models, monkeypatch):
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    write = _model_folder.write_file

    def interrupted(path, data):
        write(path, data)
        raise KeyboardInterrupt

    monkeypatch.setattr(_model_folder, "write_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_classifier(b, folder)
    assert _leftovers(tmp_path) == []
    assert _same(load_classifier(folder), a, X)


def test_a_failed_swap_puts_the_old_folder_back(tmp_path, models, monkeypatch):
    """Without an atomic exchange: the old folder is renamed aside; when the new one cannot be
    renamed into its place, the old one goes back."""
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    monkeypatch.setattr(_model_folder, "_exchange", lambda x, y: False)
    rename = os.rename

    def failing(src, dst):
        if ".saving-" in os.fspath(src):
            raise OSError(errno.EIO, "Input/output error", os.fspath(dst))
        rename(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="Input/output error"):
        save_classifier(b, folder)
    monkeypatch.undo()
    assert _leftovers(tmp_path) == []
    assert _same(load_classifier(folder), a, X)


def test_saving_over_a_model_replaces_the_whole_folder(tmp_path, models, swap):
    """The new folder holds exactly the new model's files (no stale prototypes.npz of the old
    one) and keeps the old folder's permissions; nothing is left beside it."""
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    assert (folder / "prototypes.npz").exists()
    os.chmod(folder, 0o750)
    save_classifier(b, folder)
    assert sorted(os.listdir(folder)) == ["config.json", "tree.npz", "weights.safetensors"]
    assert os.stat(folder).st_mode & 0o777 == 0o750
    assert _leftovers(tmp_path) == []
    assert _same(load_classifier(folder), b, X)


def test_a_folder_with_other_files_is_refused_not_emptied(tmp_path, models):
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"notes\.txt.*new or empty folder"):
        save_classifier(b, folder)
    assert (folder / "notes.txt").read_text() == "mine" and _same(load_classifier(folder), a, X)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a folder"):
        save_classifier(b, tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _same(load_classifier(save_classifier(b, empty)), b, X)  # an empty folder is fine


def test_a_symlinked_folder_is_replaced_behind_its_link(tmp_path, models):
    X, a, b = models
    real = save_classifier(a, tmp_path / "real")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    save_classifier(b, link)
    assert link.is_symlink() and _same(load_classifier(real), b, X)


# ---------------------------------------------------------------------------- loads racing saves
def test_a_load_cut_short_by_a_save_is_retried(tmp_path, models, monkeypatch, swap):
    """A save swaps the folder while a load is between two of its files: the load starts again
    and returns the new model whole (never the old config with the new weights)."""
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    read = _model_folder.FolderReader.read
    saved = []

    def racing(self, name):
        if name == "tree.npz" and not saved:
            saved.append(save_classifier(b, folder))
        return read(self, name)

    monkeypatch.setattr(_model_folder.FolderReader, "read", racing)
    assert _same(load_classifier(folder), b, X)


def test_a_folder_replaced_at_every_read_is_a_named_error(tmp_path, models, monkeypatch):
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    read = _model_folder.FolderReader.read
    turn = []

    def always_racing(self, name):
        if name == "tree.npz":
            turn.append(None)
            save_classifier(b if len(turn) % 2 else a, folder)
        return read(self, name)

    monkeypatch.setattr(_model_folder.FolderReader, "read", always_racing)
    monkeypatch.setattr(_model_folder, "ATTEMPTS", 3)
    with pytest.raises(ModelFileError, match=r"was replaced while it was read, 3 times"):
        load_classifier(folder)
    assert len(turn) == 3


def test_loads_during_repeated_saves_get_one_model_or_the_other(tmp_path, models, swap, one_torch_thread):
    """One thread saves A and B in turn for about a second while this one loads in a loop:
    every load succeeds and answers as A or as B."""
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    expected = {"a": a.predict(X), "b": b.predict(X)}
    stop = threading.Event()
    errors: list[BaseException] = []
    saves = [0]

    def saver():
        try:
            while not stop.is_set():
                save_classifier(b if saves[0] % 2 == 0 else a, folder)
                saves[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=saver, daemon=True)
    thread.start()
    seen = {"a": 0, "b": 0}
    # Until both sides have done enough (and at least a second together), not for a fixed time:
    # on a loaded machine a second may hold fewer saves than the assertion needs.
    start = time.monotonic()
    try:
        while (saves[0] < 4 or sum(seen.values()) < 4 or time.monotonic() - start < 1.0) \
                and time.monotonic() - start < 120:
            got = load_classifier(folder).predict(X)
            which = next((k for k, v in expected.items() if (got == v).all()), None)
            assert which is not None, "a load answered as neither model"
            seen[which] += 1
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive(), "the saving thread did not stop"
    assert not errors, errors
    assert saves[0] >= 4 and sum(seen.values()) >= 4, (saves, seen)
    assert _leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- not regular files
def _load_in_time(folder, seconds=20.0):
    """What ``load_classifier(folder)`` raised (or returned), failing the test if it hangs (a
    reader blocked on a FIFO is then released by opening it for writing)."""
    outcome = []

    def run():
        try:
            outcome.append(load_classifier(folder))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        for path in folder.iterdir():
            if path.is_fifo():
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
        pytest.fail(f"load_classifier({folder}) still runs after {seconds} s: it reads what is not a file")
    return outcome[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="POSIX FIFOs and /dev/zero")
@pytest.mark.parametrize("name, make, kind", [
    ("tree.npz", lambda path: os.mkfifo(path), "a FIFO"),
    ("prototypes.npz", lambda path: os.symlink("/dev/zero", path), "a character device behind a symlink"),
    ("weights.safetensors", lambda path: os.mkdir(path), "a folder"),
    ("config.json", lambda path: os.mkfifo(path), "a FIFO"),
])
def test_what_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path, models, name, make, kind):
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    os.unlink(folder / name)
    make(folder / name)
    outcome = _load_in_time(folder)
    assert isinstance(outcome, ModelFileError), outcome
    assert f"{name} is not a regular file (it is {kind})" in str(outcome)


def test_a_symlink_to_a_regular_file_is_followed(tmp_path, models):
    """Stores that deduplicate files (DVC, git-annex) link to them: such a folder loads."""
    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    kept = tmp_path / "store" / "weights"
    kept.parent.mkdir()
    os.replace(folder / "weights.safetensors", kept)
    os.symlink(kept, folder / "weights.safetensors")
    assert _same(load_classifier(folder), a, X)


# ---------------------------------------------------------------------------- crafted prototypes
def _put_prototypes(folder, data: bytes) -> None:
    """Replace prototypes.npz by ``data`` and recompute the digests, as an attacker who knows
    the format would, so that the checks behind the digests are reached."""
    import hashlib

    from hiclass_parallel.estimators.io._persistence import _config_digest

    (folder / "prototypes.npz").write_bytes(data)
    config = json.loads((folder / "config.json").read_text())
    config["digests"]["prototypes.npz"] = hashlib.sha256(data).hexdigest()
    config["digests"]["config.json"] = _config_digest(config)
    (folder / "config.json").write_text(json.dumps(config))


def _npz(**arrays) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _npy(array) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _huge_npy_header() -> bytes:
    """An .npy member that declares 10**12 float64s and holds none."""
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 12,)})
    return buffer.getvalue()


def _crafted(arrays):
    """A Gaussian model's saved arrays, edited."""
    sums, counts, squares = arrays["sums"], arrays["counts"], arrays["squares"]
    return {
        "garbage bytes": (b"\x80\x04garbage that is no archive" * 10, "is not an .npz archive"),
        "a bare .npy": (_npy(sums), "holds a single .npy array, not an .npz archive"),
        "sums of 1e300": (_npz(kind=np.asarray("gaussian"), sums=np.full_like(sums, 1e300), counts=counts,
                               squares=squares), "statistics overflow"),
        "an object array": (_npz(kind=np.asarray("gaussian"), sums=np.array([object()] * 3, dtype=object),
                                 counts=counts, squares=squares), "array of Python objects"),
        "integer sums": (_npz(kind=np.asarray("gaussian"), sums=sums.astype(np.int64), counts=counts,
                              squares=squares), "sums must be finite floats"),
        "a NaN": (_npz(kind=np.asarray("gaussian"), sums=np.where(sums == sums.max(), np.nan, sums), counts=counts,
                       squares=squares), "sums must be finite floats"),
        "wrong shape": (_npz(kind=np.asarray("gaussian"), sums=sums[:, :-1], counts=counts, squares=squares),
                        "sums have shape"),
        "two kinds": (_npz(kind=np.asarray(["gaussian", "cosine"]), sums=sums, counts=counts, squares=squares),
                      "its kind must be one name"),
        "an unknown kind": (_npz(kind=np.asarray("pickle"), sums=sums), "unknown kind"),
        "a huge declared array": (_zip({"sums.npy": _huge_npy_header()}), "declares shape"),
        "a damaged member": (_npz(kind=np.asarray("gaussian"), sums=sums, counts=counts, squares=squares)[:-200],
                             "damaged .npz archive"),
    }


def _zip(members: dict) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


CRAFTED = ["garbage bytes", "a bare .npy", "sums of 1e300", "an object array", "integer sums", "a NaN",
           "wrong shape", "two kinds", "an unknown kind", "a huge declared array", "a damaged member"]


@pytest.mark.parametrize("case", CRAFTED)
def test_crafted_gaussian_prototypes_are_named_errors(tmp_path, models, case):
    """Each is a ModelFileError naming prototypes.npz: never NumPy's advice to load with
    allow_pickle, an AttributeError, or a model that scores every row NaN."""
    import warnings

    X, a, b = models
    folder = save_classifier(a, tmp_path / "model")
    with np.load(folder / "prototypes.npz", allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    data, message = _crafted(arrays)[case]
    _put_prototypes(folder, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning on the way either
        with pytest.raises(ModelFileError, match=message) as raised:
            load_classifier(folder)
    assert "prototypes.npz" in str(raised.value) and "allow_pickle" not in str(raised.value)


@pytest.mark.parametrize("edit, message", [
    (lambda a: {**a, "data": np.full_like(a["data"], 1e300, dtype=np.float64)}, "not finite in float32"),
    (lambda a: {**a, "data": a["data"].astype(np.int32)}, "data must be a 1-D float array"),
    (lambda a: {**a, "shape": np.asarray([1.5, 2.0])}, "shape must be two integers"),
    (lambda a: {**a, "indices": a["indices"] + 10 ** 6}, "not a valid sparse matrix"),
])
def test_crafted_cosine_prototypes_are_named_errors(tmp_path, edit, message):
    import scipy.sparse as sp

    X, y, tree = make_hierarchical_classification(n_samples=120, n_features=20, branching=3, depth=2, random_state=1)
    X = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0, module__hidden_units=8).fit(X, y)
    folder = save_classifier(clf, tmp_path / "model")
    with np.load(folder / "prototypes.npz", allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    assert str(arrays["kind"]) == "cosine"
    _put_prototypes(folder, _npz(**edit(arrays)))
    with pytest.raises(ModelFileError, match=message):
        load_classifier(folder)
