"""Layer 7: scikit-learn estimators -- the label <-> path encoder and the classifiers.

The public estimators are the modules at this level (``classifier``, ``multilabel``,
``class_text``, ``conformal``, ``pipeline``, ``path_encoder``); the parts they compose live in the
sub-packages ``fitting``, ``prediction``, ``prototypes``, ``calibration``, ``networks`` and
``io`` (the package docstring of :mod:`hiclass_parallel` maps each concept to its
module).

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
           "TreeDecoder", "PrototypeReranker", "ServingModule", "serving_module", "export_program", "export_onnx",
           "DataParallel", "FitConfig", "ModuleCapabilities", "module_capabilities", "NonFiniteLossError",
           "DivergedError", "DivergenceWarning", "FeatureScaleWarning", "IgnoredSettingWarning", "ClassTextClassifier", "BetaCalibrator", "FlatMargins",
           "ConformalHierarchicalClassifier", "save_conformal", "load_conformal", "UnsupportedEstimatorError",
           "NonMonotoneLossError", "HierarchicalPipeline", "make_pipeline", "save_model", "load_model",
           "explain_predictions", "explain_classes", "Explanation", "ClassExplanation"]


def __getattr__(name: str) -> Any:
    if name == "HierarchicalClassifier":
        from .classifier import HierarchicalClassifier

        return HierarchicalClassifier
    if name == "MultiLabelHierarchicalClassifier":
        from .multilabel import MultiLabelHierarchicalClassifier

        return MultiLabelHierarchicalClassifier
    if name in ("MLP", "SparseMLP", "SparseLinear", "ColumnScorer", "TextBatch"):
        from .networks import _modules

        return getattr(_modules, name)
    if name == "LazyAdam":
        from .networks._optim import LazyAdam

        return LazyAdam
    if name in ("save_classifier", "load_classifier"):
        from .io import _persistence

        return getattr(_persistence, name)
    if name in ("TreeDecoder", "PrototypeReranker", "ServingModule", "serving_module", "export_program", "export_onnx"):
        from .io import _export

        return getattr(_export, name)
    if name == "FitConfig":
        from .fitting._config import FitConfig

        return FitConfig
    if name in ("ModuleCapabilities", "module_capabilities"):
        from .fitting import _capabilities

        return getattr(_capabilities, name)
    if name == "FlatMargins":
        from .prototypes._flat_margins import FlatMargins

        return FlatMargins
    if name == "BetaCalibrator":
        from .calibration._calibration import BetaCalibrator

        return BetaCalibrator
    if name == "DataParallel":
        from .networks._distributed import DataParallel

        return DataParallel
    if name == "ConformalHierarchicalClassifier":
        from .conformal import ConformalHierarchicalClassifier

        return ConformalHierarchicalClassifier
    if name in ("save_conformal", "load_conformal"):
        from .io import _conformal_persistence

        return getattr(_conformal_persistence, name)
    if name in ("explain_predictions", "explain_classes", "Explanation", "ClassExplanation"):
        from . import explain

        return getattr(explain, name)
    if name in ("HierarchicalPipeline", "make_pipeline"):
        from . import pipeline

        return getattr(pipeline, name)
    if name in ("save_model", "load_model"):
        from .io import _whole_model

        return getattr(_whole_model, name)
    if name == "ClassTextClassifier":
        from .class_text import ClassTextClassifier

        return ClassTextClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
