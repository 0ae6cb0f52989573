"""Ctrl-C on the command line: one line, exit status 130, and no report written or overwritten."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hiclass_parallel.cli import EXIT_INTERRUPTED, main

OLD_REPORT = "the report of an earlier run\n"


def _out_with_an_old_report(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.txt").write_text(OLD_REPORT)
    return out


def _assert_nothing_written(out: Path) -> None:
    assert (out / "report.txt").read_text() == OLD_REPORT  # not overwritten
    assert sorted(p.name for p in out.iterdir()) == ["report.txt"]  # nothing new, no staging folder left


def test_demo_interrupted_in_training_exits_130_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from hiclass_parallel import demo

    build = demo.build_demo_pipeline

    def interrupted_in_fit(*args, **kwargs):
        pipe = build(*args, **kwargs)

        def fit(X, y):
            raise KeyboardInterrupt  # what the classifier's fit raises on Ctrl-C

        pipe.fit = fit
        return pipe

    monkeypatch.setattr(demo, "build_demo_pipeline", interrupted_in_fit)
    out = _out_with_an_old_report(tmp_path)
    assert main(["demo", "--root", "dog.n.01", "--epochs", "2", "--out", str(out), "--quiet"]) == EXIT_INTERRUPTED == 130
    captured = capsys.readouterr()
    assert captured.err == "hiclass-parallel: interrupted\n"
    assert "trained" not in captured.out and "Held-out report" not in captured.out
    _assert_nothing_written(out)


def test_demo_interrupted_while_writing_keeps_the_old_files(tmp_path, monkeypatch, capsys):
    from hiclass_parallel import demo

    def plot(y_true, y_pred, tree, out):
        (out / "level_accuracy.png").write_bytes(b"half a plot")
        raise KeyboardInterrupt  # Ctrl-C after the training, while the files are written

    monkeypatch.setattr(demo, "_plot", plot)
    out = _out_with_an_old_report(tmp_path)
    assert main(["demo", "--root", "dog.n.01", "--epochs", "1", "--out", str(out), "--quiet"]) == 130
    assert capsys.readouterr().err == "hiclass-parallel: interrupted\n"
    _assert_nothing_written(out)


def test_ctrl_c_while_the_files_move_into_place_waits_until_they_all_have():
    from hiclass_parallel.demo import _interrupt_held

    moved = []
    with pytest.raises(KeyboardInterrupt):
        with _interrupt_held():
            signal.getsignal(signal.SIGINT)(signal.SIGINT, sys._getframe())  # what Ctrl-C runs
            moved.append("all of them")
    assert moved == ["all of them"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.slow  # a fresh interpreter loads torch and the glosses before training starts
def test_sigint_during_training_stops_the_demo(tmp_path):
    """A real SIGINT once the epoch log shows training running, as Ctrl-C in a terminal."""
    out = _out_with_an_old_report(tmp_path)
    stderr = tmp_path / "stderr.txt"
    # A small tree and more epochs than the test waits for: training is still running when it is interrupted.
    argv = [sys.executable, "-m", "hiclass_parallel", "demo", "--root", "dog.n.01", "--epochs", "100000",
            "--out", str(out)]
    with stderr.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
        try:
            deadline = time.monotonic() + 120
            training = False
            for line in proc.stdout:  # skorch's epoch log: a row per epoch (the loss in colour when it improved)
                training = re.match(r"^\s+1\s+(\x1b\[\d+m)?\d+\.\d+", line) is not None
                if training or time.monotonic() > deadline:
                    break
            assert training, "training never started"
            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, stderr.read_text()[-2000:]
    # the last line: after the progress bar's, which the interrupt leaves without its newline
    assert stderr.read_text().rstrip().splitlines()[-1].endswith("hiclass-parallel: interrupted")
    assert "trained" not in rest and "Held-out report" not in rest
    _assert_nothing_written(out)


@pytest.mark.parametrize("pressed", [False, True])
def test_a_fit_stops_only_for_a_real_ctrl_c(pressed, one_torch_thread):
    """The net tells Ctrl-C (its SIGINT handler ran) from a callback's KeyboardInterrupt, which
    ends training as in skorch (EarlyStopping raises one)."""
    from skorch.callbacks import Callback

    from hiclass_parallel.datasets import make_hierarchical_classification
    from hiclass_parallel.estimators import HierarchicalClassifier

    class StopAtEpoch2(Callback):
        def on_epoch_end(self, net, **kwargs):
            if len(net.history) == 2:
                if pressed:
                    signal.getsignal(signal.SIGINT)(signal.SIGINT, sys._getframe())  # what Ctrl-C runs
                raise KeyboardInterrupt

    X, y, tree = make_hierarchical_classification(n_samples=60, n_features=4, branching=2, depth=2, random_state=0)
    clf = HierarchicalClassifier(tree, max_epochs=4, random_state=0, module__hidden_units=4,
                                 callbacks=[StopAtEpoch2()])
    handler = signal.getsignal(signal.SIGINT)
    if pressed:
        with pytest.raises(KeyboardInterrupt):
            clf.fit(X, y)
        assert not hasattr(clf, "net_")
    else:
        assert len(clf.fit(X, y).net_.history) == 2
    assert signal.getsignal(signal.SIGINT) is handler  # the watch is put back


def test_ctrl_c_inside_a_constructor_prints_only_the_one_line(monkeypatch, capsys):
    """Ctrl-C can land inside a constructor (a progress bar's, before it sets an attribute its
    finaliser reads): the half-built object's finaliser error is not printed after the line."""
    from hiclass_parallel import cli

    class Bar:
        def __init__(self):
            raise KeyboardInterrupt  # before `pos` is set, as in a progress bar's constructor

        def __del__(self):
            self.pos  # noqa: B018 - AttributeError, as a half-built progress bar's close()

    def interrupted(args):
        Bar()

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(cli, "_cmd_tree", interrupted)
    assert cli.main(["tree", "--root", "dog.n.01"]) == 130
    assert capsys.readouterr().err == "hiclass-parallel: interrupted\n"
    assert unraisable == []
