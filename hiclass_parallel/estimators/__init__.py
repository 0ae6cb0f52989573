"""Layer 6: scikit-learn estimators -- the label <-> path encoder and the classifiers.

The public estimators are the modules at this level (``classifier``, ``multilabel``,
``class_text``, ``conformal``, ``pipeline``, ``explain``, ``path_encoder``); the parts they
compose live in sub-packages (the package docstring of :mod:`hiclass_parallel` maps each
concept to its module). Inside, from the bottom up, each part imports only from the lines
above its own, and another folder only through its face (its ``__init__.py``, which names what
other folders may use); ``tests/test_layers.py`` checks every import, function-local ones too,
against this list:

1. ``_defaults`` -- every default, one row each;
2. ``_checks`` -- the checks fit and predict share (``X``, prediction settings, device);
3. ``networks/`` -- the torch modules, the skorch net, the optimizer, the training engines;
4. ``answer/`` -- the answer model: its terms, their weights, the calibrator;
5. ``prediction/`` -- the prediction methods and the one decoding dispatcher;
6. ``fitting/`` -- the fit pipeline and its configuration (it decodes with ``prediction/``);
7. ``path_encoder``, ``classifier`` -- the encoder; the classifier, composed of the above;
8. ``multilabel`` -- the classifier of label sets, a subclass of the classifier;
9. ``class_text``, ``conformal``, ``explain``, ``pipeline`` -- estimators around the classifiers;
10. ``io/`` -- saving, loading and exporting the public estimators (``load_model`` builds them).

:class:`PathEncoder` needs only NumPy; :class:`HierarchicalClassifier` and :class:`MLP` need
torch and skorch, which are imported the first time one of them is used.
"""

from typing import Any

from ..exceptions import (
    DivergedError,
    DivergenceWarning,
    FeatureScaleWarning,
    IgnoredSettingWarning,
    ModelFileError,
    NonFiniteLossError,
    NonMonotoneLossError,
    UnsupportedEstimatorError,
)
from .path_encoder import PathEncoder

__all__ = ["HierarchicalClassifier", "MultiLabelHierarchicalClassifier", "PathEncoder", "MLP", "SparseMLP", "SparseLinear", "ColumnScorer", "TextBatch", "LazyAdam",
           "save_classifier", "load_classifier", "ModelFileError",
           "TreeDecoder", "AnswerReranker", "ServingModule", "serving_module", "export_program", "export_onnx",
           "DataParallel", "FitConfig", "ModuleCapabilities", "module_capabilities", "NonFiniteLossError",
           "DivergedError", "DivergenceWarning", "FeatureScaleWarning", "IgnoredSettingWarning", "ClassTextClassifier", "BetaCalibrator", "FlatMargins",
           "ConformalHierarchicalClassifier", "save_conformal", "load_conformal", "UnsupportedEstimatorError",
           "NonMonotoneLossError", "HierarchicalPipeline", "make_pipeline", "save_model", "load_model",
           "explain_predictions", "explain_classes", "Explanation", "ClassExplanation"]


# Function-local imports on purpose: each name loads its module (and torch, skorch) on first use,
# so `import hiclass_parallel` stays light.
def __getattr__(name: str) -> Any:
    if name == "HierarchicalClassifier":
        from .classifier import HierarchicalClassifier

        return HierarchicalClassifier
    if name == "MultiLabelHierarchicalClassifier":
        from .multilabel import MultiLabelHierarchicalClassifier

        return MultiLabelHierarchicalClassifier
    if name in ("MLP", "SparseMLP", "SparseLinear", "ColumnScorer", "TextBatch", "LazyAdam", "DataParallel",
                "ModuleCapabilities", "module_capabilities"):
        from . import networks

        return getattr(networks, name)
    if name in ("save_classifier", "load_classifier", "save_conformal", "load_conformal", "save_model", "load_model",
                "TreeDecoder", "AnswerReranker", "ServingModule", "serving_module", "export_program", "export_onnx"):
        from . import io

        return getattr(io, name)
    if name == "FitConfig":
        from .fitting import FitConfig

        return FitConfig
    if name == "FlatMargins":
        from .answer import FlatMargins

        return FlatMargins
    if name == "BetaCalibrator":
        from .answer import BetaCalibrator

        return BetaCalibrator
    if name == "ConformalHierarchicalClassifier":
        from .conformal import ConformalHierarchicalClassifier

        return ConformalHierarchicalClassifier
    if name in ("explain_predictions", "explain_classes", "Explanation", "ClassExplanation"):
        from . import explain

        return getattr(explain, name)
    if name in ("HierarchicalPipeline", "make_pipeline"):
        from . import pipeline

        return getattr(pipeline, name)
    if name == "ClassTextClassifier":
        from .class_text import ClassTextClassifier

        return ClassTextClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
