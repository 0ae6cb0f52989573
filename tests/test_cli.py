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
    assert re.search(r"^\s+19\s+1\s+1$", out, re.M)  # depth 19 holds rock_hind.n.01 alone


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
    assert result["hierarchical_f1"] == pytest.approx(0.5135, abs=0.05)
    assert result["exact_path_accuracy"] == pytest.approx(5 / 38, abs=0.06)
    out = capsys.readouterr().out
    assert "Held-out report" in out and "    -> dog.n.01" in out  # paths start at the root


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", "--help"], capture_output=True, text=True)
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
