"""The command line, the demo (small settings) and the README's promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hiclass_parallel.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_tree_command_describes_shipped_wordnet(capsys):
    assert main(["tree"]) == 0
    out = capsys.readouterr().out
    assert "Tree(n_classes=117659, n_levels=20" in out
    assert re.search(r"^\s+19\s+1\s+1$", out, re.MULTILINE)  # depth 19 holds rock_hind.n.01 alone


def test_tree_command_subtree_and_file(tmp_path, capsys):
    from hiclass_parallel import Tree

    path = tmp_path / "toy.npz"
    Tree.from_dict({"dog": {"big dog": ["happy"]}, "cat": None}).save(path)
    assert main(["tree", str(path), "--root", "dog"]) == 0
    out = capsys.readouterr().out
    assert "subtree under 'dog'" in out and "Tree(n_classes=3, n_levels=3, n_leaves=1)" in out


def test_parser_rejects_unknown_command():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["nonsense"])


def test_demo_small(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the demo's plot needs matplotlib (extra 'plot')")
    from hiclass_parallel.demo import run_demo

    result = run_demo(root="dog.n.01", epochs=3, out=tmp_path, verbose=False, n_examples=2)
    assert result["plot"] is not None and Path(result["plot"]).exists()
    # Recorded on the development machine (1 and 2 torch threads alike, and before the classifier's
    # split into modules): 38 held-out synsets, so one changed prediction moves the F1 by ~0.02.
    # The most-frequent baseline involves no network: it must match to the digit.
    assert result["baseline_hierarchical_f1"] == pytest.approx(0.5982, abs=1e-4)
    # With class prototypes and the flat linear term re-ranking the answer and batches of 32
    # (2026-11-28; before the last two: 0.7253 and 14 / 38; before prototypes: 0.5135 and 5 / 38).
    assert result["hierarchical_f1"] == pytest.approx(0.8909, abs=0.05)
    assert result["exact_path_accuracy"] == pytest.approx(23 / 38, abs=0.06)
    out = capsys.readouterr().out
    assert "Held-out report" in out and "    -> dog.n.01" in out  # paths start at the root
    # --out promises the plot and the report: the text as printed, the figures as JSON.
    text = Path(result["report_text"]).read_text()
    assert Path(result["report_text"]) == tmp_path / "report.txt" and result["report"] in text
    assert "training on 150 rows, 189 classes, 3 epochs" in text and "hierarchical F1 " in text
    # 150 rows hold out 7 at the default size: too few to calibrate, so nothing is said of it.
    assert result["mean_confidence"] is None and "calibrate" not in text
    import json

    figures = json.loads((tmp_path / "report.json").read_text())
    assert Path(result["report_json"]) == tmp_path / "report.json"
    for key in ("hierarchical_f1", "exact_path_accuracy", "n_train", "n_test", "epochs"):
        assert figures[key] == pytest.approx(result[key]), key
    assert figures["baseline"]["hierarchical_f1"] == pytest.approx(result["baseline_hierarchical_f1"])
    assert figures["root"] == "dog.n.01" and figures["n_classes"] == 189 and len(figures["level_accuracy"]) == 6
    assert figures["level_accuracy"][0] == 1.0 and figures["level_support"][0] == 38
    assert 0 < figures["hierarchical_precision"] <= 1 and figures["mean_tree_distance"] >= 0


def test_demo_plan_says_which_rows_calibrate():
    from hiclass_parallel.demo import _plan

    assert "1,000 of the rows are held out of training, to calibrate predict_confidence" in _plan(65_691, 82_115, 3, "cpu")
    assert "250 of the rows train only in the last epoch" in _plan(5_000, 100, 7, "cpu")
    assert "calibrate" not in _plan(1_000, 100, 7, "cpu")


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", "--help"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "demo" in done.stdout
    assert "python -m benchmarks.bench_engine" in done.stdout  # the benchmarks run from the checkout


def test_benchmark_is_no_subcommand():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["benchmark"])


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"```bash\n(python3\.11 -m venv .*)\n```", readme)
    assert len(commands) == 2, "the README must show exactly two set-up commands"
    main_job, tests = commands
    assert "hiclass-parallel demo" in main_job
    assert tests in ci.splitlines()


# ----------------------------------------------------- first use: --root, the demo's plan, usage errors
def _run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hiclass_parallel", *argv], capture_output=True, text=True,
                          timeout=300)


def test_tree_root_selects_an_integer_label(tmp_path, capsys):
    from hiclass_parallel import Tree

    path = tmp_path / "int.npz"
    Tree.from_parents([-1, 0, 0, 1, -1]).save(path)  # labels are the ids 0..4
    assert main(["tree", str(path), "--root", "0"]) == 0
    out = capsys.readouterr().out
    assert "subtree under 0\n" in out and "Tree(n_classes=4, n_levels=3, n_leaves=2)" in out
    # A string label that looks like a number is still found as the string.
    Tree.from_parents([-1, 0, -1], labels=["0", "a", "b"]).save(path)
    assert main(["tree", str(path), "--root", "0"]) == 0
    assert "subtree under '0'\n" in capsys.readouterr().out


def test_tree_root_error_describes_this_trees_labels(tmp_path, capsys):
    from hiclass_parallel import Tree

    path = tmp_path / "int.npz"
    Tree.from_parents([-1, 0, 0]).save(path)
    assert main(["tree", str(path), "--root", "dog"]) == 2
    err = capsys.readouterr().err
    assert "not a class of the tree: 'dog'" in err and "labels are integers, 0 to 2" in err
    assert "WordNet" not in err
    Tree.from_edges([("dog", "animal"), ("cat", "animal")]).save(path)
    assert main(["tree", str(path), "--root", "7"]) == 2
    err = capsys.readouterr().err
    assert "'7'" in err and "labels are like 'dog', 'animal', 'cat'" in err and "WordNet" not in err
    # The shipped tree is WordNet's: there the hint names synsets.
    assert main(["tree", "--root", "nope"]) == 2
    assert "labels are WordNet synset names such as dog.n.01" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_demo_checks_out_before_loading_or_training(tmp_path, monkeypatch, capsys, kind):
    import hiclass_parallel.datasets

    def no_loading(*args, **kwargs):
        raise AssertionError("the demo loaded data before checking --out")

    monkeypatch.setattr(hiclass_parallel.datasets, "load_wordnet_glosses", no_loading)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker if kind == "file" else blocker / "sub"
    assert main(["demo", "--root", "dog.n.01", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing loaded, nothing planned, nothing trained
    err = captured.err.strip()
    assert err.startswith("hiclass-parallel: error: ") and str(out) in err and "\n" not in err


def test_prepare_out_dir_creates_the_folder(tmp_path):
    from hiclass_parallel.demo import prepare_out_dir

    out = prepare_out_dir(tmp_path / "new" / "deeper")
    assert out.is_dir() and list(out.iterdir()) == []  # the write probe leaves nothing behind


@pytest.mark.parametrize(
    "argv, message, help_of",
    [
        (["demo", "--epochs", "x"], "argument --epochs: invalid int value: 'x'", "hiclass-parallel demo --help"),
        (["demo", "--partition", "nope"], "argument --partition: invalid choice: 'nope'", "hiclass-parallel demo --help"),
        (["tree", "a.npz", "b.npz"], "unrecognized arguments: b.npz", "hiclass-parallel --help"),
        (["nonsense"], "argument command: invalid choice: 'nonsense'", "hiclass-parallel --help"),
    ],
)
def test_usage_errors_start_like_every_other_error(argv, message, help_of, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hiclass-parallel: error: ") and message in err and f"(see {help_of})" in err
    assert len(err.strip().splitlines()) == 1


def test_exit_status_with_and_without_debug_is_the_readmes():
    plain = _run_cli("tree", "missing.npz")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    debug = _run_cli("--debug", "tree", "missing.npz")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "prints one line on stderr and exits with status 2" in readme
    assert "with `--debug` the exception propagates" in readme and "Python's for an uncaught exception, 1" in readme
    import hiclass_parallel.cli

    doc = " ".join(hiclass_parallel.cli.__doc__.split())
    assert "exit with status 2" in doc and "the exit status is then Python's for an uncaught exception, 1" in doc


@pytest.mark.parametrize("epochs", ["0", "-3"])
def test_demo_refuses_zero_epochs(epochs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--epochs", epochs])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hiclass-parallel: error: argument --epochs: must be at least 1") and repr(epochs) in err


def test_run_demo_refuses_zero_epochs(tmp_path):
    from hiclass_parallel.demo import run_demo

    with pytest.raises(ValueError, match=r"epochs=0: the demo trains at least 1 epoch"):
        run_demo("dog.n.01", epochs=0, out=tmp_path)


def test_demo_full_tree_places_nouns_and_verbs_in_the_whole_tree(monkeypatch, capsys):
    from hiclass_parallel import datasets, demo
    from hiclass_parallel.datasets import load_wordnet_glosses

    asked = []

    def spying_load(root=None, pos="n", **kwargs):
        asked.append((root, pos))
        data = load_wordnet_glosses(root, pos=pos, **kwargs)
        assert data.tree.n_classes == 117_659
        raise KeyboardInterrupt  # stop before the features and training: the task is what is checked

    monkeypatch.setattr(datasets, "load_wordnet_glosses", spying_load)
    with pytest.raises(KeyboardInterrupt):
        demo.run_demo(full_tree=True, out=None, verbose=False)
    assert asked == [(None, None)]
    with pytest.raises(ValueError, match="full_tree=True and root='dog.n.01' name two tasks"):
        demo.run_demo("dog.n.01", full_tree=True, out=None)


def test_demo_prints_its_plan_before_training_and_keeps_the_epochs_it_plans(monkeypatch, capsys):
    from hiclass_parallel import demo

    build = demo.build_demo_pipeline
    printed_before_fit = []

    def spying_build(*args, **kwargs):
        pipe = build(*args, **kwargs)
        fit = pipe.fit

        def fit_after_plan(*a, **k):
            printed_before_fit.append(capsys.readouterr().out)
            return fit(*a, **k)

        pipe.fit = fit_after_plan
        return pipe

    monkeypatch.setattr(demo, "build_demo_pipeline", spying_build)
    result = demo.run_demo("dog.n.01", epochs=None, out=None, verbose=False, n_examples=0)
    (before,) = printed_before_fit
    # 150 training rows in batches of 32 make 5 steps per epoch: the classifier's text default is
    # then round(35 / sqrt(5)) = 16 epochs.
    assert ("training on 150 rows, 189 classes, 16 epochs (the classifier's default for this many rows), "
            "device cpu\nrough estimate: under 10 s of training on 2 idle cores") in before
    assert "several times longer, or more, when other processes share the cores" in before
    assert result["epochs"] == 16  # what the fitted net ran: the plan's epochs are the real ones
    assert "trained 16 epochs in" in capsys.readouterr().out


def test_time_estimate_is_the_recorded_run_scaled():
    from hiclass_parallel.demo import _plan, estimate_training_seconds

    assert estimate_training_seconds(65_691, 2, 82_115) == (18.0, 19.5)  # the README's main job
    # Recorded subtree fits (a text benchmark run, the classifier's fit alone)
    # fall within 0.5x-1.3x: the recorded main job includes its TF-IDF fit (about 8 of its
    # 18-20 s), which grows with the text more than with the classes, so the estimate runs high
    # on small subtrees (animal 0.78x, artifact 0.94x, person 0.92x).
    for rows, epochs, classes, recorded in [(3_212, 10, 4_017, 2.3), (8_402, 7, 10_504, 6.5), (8_232, 7, 10_292, 6.2)]:
        low, high = estimate_training_seconds(rows, epochs, classes)
        assert 0.5 * low <= recorded <= 1.3 * high
    plan = _plan(65_691, 82_115, None, "cpu")
    assert "65,691 rows, 82,115 classes, 2 epochs" in plan and "about 18-20 s of training on 2 idle cores" in plan
    assert "rough estimate" in plan
    assert "no time estimate for device 'cuda'" in _plan(65_691, 82_115, 5, "cuda")


def test_level_plot_labels_are_readable(monkeypatch):
    """The n= labels of the main job's 20 levels: none overlaps another, none straddles its bar's edge."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from hiclass_parallel.metrics import plot

    # The supports and accuracies of the shipped demo plot (all nouns, 16,423 held out).
    support = np.array([16423, 16422, 16418, 16379, 16030, 15103, 13334, 10309, 7550, 4775, 2640, 1439, 793, 449,
                        263, 157, 58, 9, 0, 0], dtype=float)
    acc = np.array([1, .93, .85, .81, .77, .72, .69, .62, .6, .58, .56, .58, .56, .57, .58, .36, .22, .11,
                    np.nan, np.nan])
    monkeypatch.setattr(plot, "level_accuracy_score", lambda *args, **kwargs: (acc, support))
    ax = plot.plot_level_accuracy(None, None, None)
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [text.get_window_extent(renderer) for text in ax.texts]
    assert [t.get_text() for t in ax.texts][:2] == ["n=16,423", "n=16,422"] and len(boxes) == 20
    for i in range(len(boxes) - 1):
        assert not boxes[i].overlaps(boxes[i + 1]), (ax.texts[i].get_text(), ax.texts[i + 1].get_text())
    axes_box = ax.get_window_extent(renderer)
    for text, box, bar in zip(ax.texts, boxes, ax.patches):
        bar_box = bar.get_window_extent(renderer)
        assert bar_box.x0 <= box.x0 and box.x1 <= bar_box.x1, text.get_text()  # within its bar's width
        inside = box.y1 <= bar_box.y1 - 2 and box.y0 >= bar_box.y0  # padded from the top edge
        above = box.y0 >= bar_box.y1 + 2 and box.y1 <= axes_box.y1
        assert inside or above, text.get_text()
    plt.close(fig)


def test_readme_quick_start_prints_what_it_shows(tmp_path):
    """The README's quick start, saved and run as a script as a new user would, prints the paths shown."""
    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):]
    snippet = re.search(r"```python\n(.*?)```", quick, re.DOTALL).group(1)
    shown = re.search(r"```text\n(.*?)```", quick, re.DOTALL).group(1)
    script = tmp_path / "quick_start.py"
    script.write_text(snippet)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown.splitlines()


# ---------------------------------------------------------------------------- bad and extreme input
# Regression probes: each once gave a wrong result, a bare crash or a misleading error; each
# asserts the correct result or the named error now.
@pytest.mark.parametrize(
    "argv, message",
    [
        (["tree", "missing.npz"], "No such file or directory: missing.npz"),
        (["tree", "--root", "nope.n.01"], "1 label is not a class of the tree: 'nope.n.01'"),
        (["demo", "--device", "nonsense"], "device='nonsense' is not a torch device"),
        (["tree", "--bogus"], "unrecognized arguments: --bogus"),
        (["demo", "--full-tree", "--root", "dog.n.01"], "--full-tree and --root dog.n.01 name two tasks"),
    ],
)
def test_cli_errors_are_one_line(argv, message):
    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", *argv], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hiclass-parallel: error: ") and message in err[0]
    assert "Traceback" not in done.stderr


def test_cli_debug_shows_traceback_and_version():
    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", "--debug", "tree", "missing.npz"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" in done.stderr and "FileNotFoundError" in done.stderr
    from hiclass_parallel import __version__

    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", "--version"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == f"hiclass-parallel {__version__}"


def test_cli_device_cuda_without_gpu(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from hiclass_parallel.cli import main

    assert main(["demo", "--device", "cuda"]) == 2
    assert "device='cuda' but torch" in capsys.readouterr().err


def test_tree_command_reports_the_readme_buffers(capsys):
    from hiclass_parallel.cli import main

    assert main(["tree"]) == 0
    out = capsys.readouterr().out
    assert "host arrays 12.71 MB in all" in out and "tree buffers\"): 10.35 MB" in out
