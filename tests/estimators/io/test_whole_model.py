"""The whole model saved without pickle (``save_model``/``load_model``), and ``HierarchicalPipeline``.

Round trips of pipelines of scikit-learn transformers, class text and conformal wrappers; hostile
folders (edited parts, parts swapped in from another save, types off the allow-list, functions)
are refused by name, and loading never unpickles.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import FunctionTransformer, Normalizer, PowerTransformer, StandardScaler

from hiclass_parallel.estimators import (
    ClassTextClassifier,
    ConformalHierarchicalClassifier,
    HierarchicalClassifier,
    HierarchicalPipeline,
    ModelFileError,
    load_model,
    make_pipeline,
    save_model,
)

pytest.importorskip("skops")
pytest.importorskip("safetensors")

PATHS = ["food/fruit/apple", "food/fruit/pear", "food/veg/kale", "tools/saw", "tools/drill", "tools/hammer"]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    y = [PATHS[i % len(PATHS)] for i in range(120)]
    X = [p.replace("/", " ") + f" w{rng.integers(30)}" for p in y]
    return X, y


def _clf(**kw):
    return HierarchicalClassifier(path_sep="/", max_epochs=4, random_state=0, **kw)


@pytest.fixture(scope="module")
def pipeline(data):
    return make_pipeline(TfidfVectorizer(), _clf()).fit(*data)


def _same(a, b, X):
    assert a.predict(X).tolist() == b.predict(X).tolist()
    assert np.allclose(a.predict_proba(X), b.predict_proba(X), atol=1e-6)


# ---------------------------------------------------------------------------- the pipeline
def test_pipeline_passes_x_to_the_classifier_methods(pipeline, data):
    X, _ = data
    features = pipeline[:-1].transform(X[:5])
    clf = pipeline[-1]
    assert pipeline.predict_top_k(X[:5], 3).tolist() == clf.predict_top_k(features, 3).tolist()
    assert np.allclose(pipeline.predict_confidence(X[:5]), clf.predict_confidence(features))
    assert pipeline.predict_labels(X[:5]).tolist() == clf.predict_labels(features).tolist()
    assert np.allclose(pipeline.predict_answer_proba(X[:5]), clf.predict_answer_proba(features))
    assert pipeline.predict_node(X[:5]).tolist() == clf.predict_node(features).tolist()
    # available_if: a final step without the method hides it.
    plain = HierarchicalPipeline([("scale", StandardScaler()), ("svd", TruncatedSVD(2))])
    assert not hasattr(plain, "predict_top_k")


def test_pipeline_clones_searches_and_routes(data):
    X, y = data
    model = make_pipeline(TfidfVectorizer(), _clf())
    assert type(clone(model)) is HierarchicalPipeline
    search = GridSearchCV(model, {"hierarchicalclassifier__lr": [0.003, 0.01]}, cv=KFold(2)).fit(X, y)
    assert type(search.best_estimator_) is HierarchicalPipeline
    assert search.best_estimator_.predict_top_k(X[:2], 2).shape == (2, 2)
    weights = np.ones(len(y))
    with sklearn.config_context(enable_metadata_routing=True):
        routed = make_pipeline(TfidfVectorizer(), _clf().set_fit_request(sample_weight=True).set_score_request(
            sample_weight=True))
        routed.fit(X, y, sample_weight=weights)
        assert 0 < routed.score(X, y, sample_weight=weights) <= 1


# ---------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("features", [
    TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2)),
    FeatureUnion([("words", TfidfVectorizer()), ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3)))]),
    Pipeline([("tfidf", TfidfVectorizer()), ("svd", TruncatedSVD(8, random_state=0)), ("norm", Normalizer())]),
])
def test_pipelines_round_trip(features, data, tmp_path):
    model = make_pipeline(features, _clf()).fit(*data)
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert type(loaded) is HierarchicalPipeline and [n for n, _ in loaded.steps] == [n for n, _ in model.steps]
    _same(model, loaded, data[0][:20])
    assert loaded.predict_top_k(data[0][:3], 2).tolist() == model.predict_top_k(data[0][:3], 2).tolist()


def test_column_transformer_and_sklearn_pipeline_round_trip(data, tmp_path):
    pd = pytest.importorskip("pandas")
    X, y = data
    frame = pd.DataFrame({"text": X, "length": [float(len(t)) for t in X]})
    columns = ColumnTransformer([("text", TfidfVectorizer(), "text"), ("num", StandardScaler(), ["length"])])
    model = Pipeline([("columns", columns), ("clf", _clf())]).fit(frame, y)
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert type(loaded) is Pipeline
    _same(model, loaded, frame.iloc[:20])


def test_class_text_and_conformal_round_trip(data, tmp_path):
    X, y = data
    names = {p: p.split("/")[-1] for p in PATHS}
    text = ClassTextClassifier(TfidfVectorizer(), _clf(), class_text=names).fit(X, y)
    save_model(text, tmp_path / "text")
    loaded = load_model(tmp_path / "text")
    _same(text, loaded, X[:20])
    assert loaded.class_texts_ == text.class_texts_
    conformal = ConformalHierarchicalClassifier(make_pipeline(TfidfVectorizer(), _clf()), alpha=0.2,
                                                random_state=0).fit(X, y)
    save_model(conformal, tmp_path / "conformal")
    again = load_model(tmp_path / "conformal")
    assert again.lambda_ == conformal.lambda_
    assert again.predict(X[:20]).tolist() == conformal.predict(X[:20]).tolist()
    assert type(again.estimator_) is HierarchicalPipeline


def test_a_loaded_prefit_conformal_model_keeps_its_own_classifier(data, tmp_path):
    X, y = data
    fitted = make_pipeline(TfidfVectorizer(), _clf()).fit(X, y)
    conformal = ConformalHierarchicalClassifier(fitted, cv="prefit", alpha=0.2, random_state=0).fit(X[60:], y[60:])
    save_model(conformal, tmp_path / "prefit")
    loaded = load_model(tmp_path / "prefit")
    answers = loaded.predict(X[:20]).tolist()
    assert loaded.estimator_ is not loaded.estimator
    loaded.estimator.set_params(hierarchicalclassifier__max_epochs=1).fit(X[:30], y[:30])  # the user refits it
    assert loaded.predict(X[:20]).tolist() == answers


def test_loading_never_unpickles(pipeline, data, tmp_path, monkeypatch):
    save_model(pipeline, tmp_path / "m")

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    _same(pipeline, load_model(tmp_path / "m"), data[0][:10])


# ---------------------------------------------------------------------------- hostile folders
def _rewrite(folder, name, data):
    """Put ``data`` in ``name`` and make model.json's digests match, as a forger would."""
    (folder / name).write_bytes(data)
    record = json.loads((folder / "model.json").read_text())
    record["digests"][name] = hashlib.sha256(data).hexdigest()
    content = {k: v for k, v in record.items() if k != "digest"}
    record["digest"] = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    (folder / "model.json").write_text(json.dumps(record))


def test_edited_and_swapped_parts_are_refused(pipeline, data, tmp_path):
    folder = save_model(pipeline, tmp_path / "m")
    damaged = bytearray((folder / "transformers.skops").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (folder / "transformers.skops").write_bytes(bytes(damaged))
    with pytest.raises(ModelFileError, match="transformers.skops does not match model.json"):
        load_model(folder)
    # A classifier folder swapped in from another save.
    save_model(pipeline, tmp_path / "m")
    other = save_model(make_pipeline(TfidfVectorizer(), _clf(lr=0.02)).fit(*data), tmp_path / "other")
    shutil.rmtree(folder / "classifier")
    shutil.copytree(other / "classifier", folder / "classifier")
    with pytest.raises(ModelFileError, match="classifier/.* does not match model.json"):
        load_model(folder)
    # model.json edited by hand.
    save_model(pipeline, tmp_path / "m")
    record = json.loads((folder / "model.json").read_text())
    record["pipeline"]["verbose"] = True
    (folder / "model.json").write_text(json.dumps(record))
    with pytest.raises(ModelFileError, match="modified after it was saved"):
        load_model(folder)


def test_types_off_the_list_and_functions_are_refused_by_name(pipeline, data, tmp_path):
    import skops.io as sio

    folder = save_model(pipeline, tmp_path / "m")
    X = np.abs(np.random.default_rng(0).normal(size=(20, 3)))
    _rewrite(folder, "transformers.skops", sio.dumps([PowerTransformer().fit(X)]))
    with pytest.raises(ModelFileError, match=r"not trusted: sklearn\.preprocessing\._data\.PowerTransformer"):
        load_model(folder)
    assert isinstance(load_model(folder, allowed=["sklearn.preprocessing._data.PowerTransformer"])[0], PowerTransformer)
    # A function (which skops would call) is refused even where skops itself trusts it.
    _rewrite(folder, "transformers.skops", sio.dumps([FunctionTransformer(np.log1p)]))
    with pytest.raises(ModelFileError, match=r"numpy\.log1p \(FunctionNode\)"):
        load_model(folder, allowed=["numpy.log1p"])
    _rewrite(folder, "transformers.skops", b"PK\x05\x06" + b"\x00" * 18)
    with pytest.raises(ModelFileError, match="is not a skops file"):
        load_model(folder)
    with pytest.raises(TypeError, match="numpy.log1p"):
        save_model(make_pipeline(FunctionTransformer(np.log1p), _clf()).fit(X, [PATHS[i % 6] for i in range(20)]),
                   tmp_path / "f")
