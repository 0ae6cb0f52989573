"""placeholder"""
HIDDEN_UNITS = 256
SVM_PASSES = 1.0
TERM_BUDGET = 0.3

#: ``batch_size="auto"``: training batches of this many rows, and prediction batches always
#: (read by ``fitting/_config`` and ``_checks.inference_batch_size``).
BATCH_SIZE = 256
