"""The new user's flow, run from the docs' own code: ``docs/getting-started.md``'s Python blocks,
in order, in one namespace. Fit on label paths, score a split holding classes the training rows
lack, search settings with ``GridSearchCV``, save and load the whole pipeline without pickle, and
ask for top-k and confidence on raw text."""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from hiclass_parallel.exceptions import UnknownClassWarning

DOC = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"
README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_getting_started_runs_as_printed(tmp_path, monkeypatch):
    pytest.importorskip("skops")
    pytest.importorskip("safetensors")
    monkeypatch.chdir(tmp_path)  # the blocks write tree.npz and model/
    namespace: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for block in _blocks(DOC.read_text()):
            exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the docs' own code
    model, loaded = namespace["model"], namespace["loaded"]
    # Fit on label paths: answers are paths of the user's names.
    assert model.predict(["usb-c cable"]).tolist() == [["Electronics", "Cables", ""]]
    # A split with a class the model lacks is scored, with one warning saying so.
    assert "Socks" not in set(model[-1].tree_.names.tolist())
    unknown = [w for w in caught if issubclass(w.category, UnknownClassWarning)]
    assert any("1 of 3 rows of y" in str(w.message) for w in unknown)
    # Top-k and confidence on raw text, from the pipeline and from the loaded copy alike.
    best = namespace["search"].best_estimator_
    assert loaded.predict_top_k(["usb-c cable"], 2).tolist() == best.predict_top_k(["usb-c cable"], 2).tolist()
    assert np.allclose(loaded.predict_confidence(["wireless earbuds"]), best.predict_confidence(["wireless earbuds"]))
    assert (tmp_path / "model" / "model.json").is_file()


def test_the_split_with_unseen_classes_scores_as_documented():
    namespace: dict = {}
    blocks = _blocks(DOC.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(blocks[0], str(DOC), "exec"), namespace)  # noqa: S102 - fit
        scoring = next(b for b in blocks if "test_paths" in b)
        exec(compile(scoring, str(DOC), "exec"), namespace)  # noqa: S102 - the held-out split
    model = namespace["model"]
    with pytest.warns(UnknownClassWarning, match="1 of 3 rows of y"):
        score = model.score(namespace["test_texts"], namespace["test_paths"])
    assert 0.3 < score < 1.0
    with pytest.warns(UnknownClassWarning):
        assert pickle.loads(pickle.dumps(model)).score(namespace["test_texts"], namespace["test_paths"]) == score


def test_the_readme_quick_start_and_next_steps_run(tmp_path, monkeypatch):
    pytest.importorskip("skops")
    pytest.importorskip("safetensors")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    quick, following = _blocks(README.read_text())[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(quick, str(README), "exec"), namespace)  # noqa: S102 - the README's own code
        exec(compile(following, str(README), "exec"), namespace)  # noqa: S102
    assert namespace["model"].predict_top_k(["wireless earbuds"], 3).shape[:2] == (1, 3)
