"""Saving and serving fitted models: saving without pickle (``_persistence``), the model folder
replaced and read as a whole (``_model_folder``), a conformal classifier's folder
(``_conformal_persistence``), a whole model with its scikit-learn parts (``_whole_model``) and
export for serving (``_export``)."""
