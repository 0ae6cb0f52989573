"""Saving and serving fitted models: saving without pickle (``_persistence``), the model folder
replaced and read as a whole (``_model_folder``), a conformal classifier's folder
(``_conformal_persistence``), a whole model with its scikit-learn parts (``_whole_model``) and
export for serving (``_export``).

``io`` stands above the public estimators (it saves them, and loading builds them); nothing of
:mod:`hiclass_parallel.estimators` imports it but the package's face, which hands these names on.
"""

from ._conformal_persistence import load_conformal, save_conformal
from ._export import AnswerReranker, ServingModule, TreeDecoder, export_onnx, export_program, serving_module
from ._persistence import load_classifier, save_classifier
from ._whole_model import load_model, save_model

__all__ = ["AnswerReranker", "ServingModule", "TreeDecoder", "export_onnx", "export_program", "load_classifier",
           "load_conformal", "load_model", "save_classifier", "save_conformal", "save_model", "serving_module"]
