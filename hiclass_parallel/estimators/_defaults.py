"""Every default of the estimators' fit and answer, in one table: its value, the rule that applies it, its evidence.

A module directly under ``estimators/``, below every sub-package: any of them reads its defaults
from here, and no other module of ``fitting/`` or ``answer/`` defines a number of its own
(``tests/estimators/test_defaults.py`` scans them, and checks that each row's evidence names a
section of the documentation that exists). Each constant below has one row of :data:`TABLE`
(:class:`Default`: name, value, rule, evidence); ``docs/choosing-settings.md`` ("Every default")
points here.

============================  ==========  =============================================================
name                          value       rule that applies it
============================  ==========  =============================================================
``TERM_BUDGET``               0.5         the linear terms are tried where their estimated costs together
                                          are within this share of the network's estimated fit
``SVM_PASSES``                27          liblinear's effective passes in the cost estimates
``SVM_TARGET_COST``           4e6         the fixed cost of one target's SVM of the candidates
``DECODE_SHARE``              0.05        a decoding multiply-add against a training one, in the estimates
``SOLVE_SHARE``               0.12        a least-squares solve's multiply-add against a training one
``FOLDS``                     2           folds of the cross-fitting that learns the weights
``CROSS_FIT_MAX_ROWS``        2000        cross-fitting below this many rows; the calibration share from it
``MIN_GAIN``                  1.92        a term whose held-out gain is under this is dropped
``PENALTY``                   1.0         L2 pull of each standardised term weight towards 0
``JOINT_MIN_ROWS``            20          usable held-out rows the joint fit needs
``PROTOTYPE_FEATURES``        32          feature sums kept per class prototype
``PROTOTYPES_MAX_WEIGHT``     64.0        the largest weight the single-term fit of the prototypes gives
``PROTOTYPES_MIN_ROWS``       20          held-out rows that single-term fit needs
``PROTOTYPES_START_WEIGHT``   16.0        the prototypes' weight before the answer model learns it
``GAUSSIAN_SHRINKAGE``        1.0         shrinkage of the Gaussian prototypes' variances
``GAUSSIAN_MAX_WEIGHT``       1024.0      the largest weight of the Gaussian prototypes' single-term fit
``GAUSSIAN_START_WEIGHT``     1.0         the Gaussian prototypes' weight before it is learnt
``NO_TARGET_MARGIN``          -1.0        the flat term's margin of a candidate no row was labelled with
``LEAST_SQUARES_PENALTY``     0.5         ridge penalty of the least-squares SVM (``C=1``)
``CALIBRATION_MIN_AUTO_ROWS`` 100         ``calibration="auto"`` holds rows out from this many
``CALIBRATION_REJOIN_EPOCHS`` 5           held-out rows join the last epoch from this many epochs
``CALIBRATION_MIN_ROWS``      20          the calibrator's minimum of held-out rows
``CALIBRATION_CLIP``          1e-7        probabilities clipped before the calibrator's logit
``BATCH_SIZE``                256         ``batch_size="auto"``; prediction batches always
``MIN_STEPS_PER_EPOCH``       4           the text model halves its batch until an epoch has this many steps
``MIN_BATCH_SIZE``            32          ... down to this
``SOFTMAX_SAMPLE``            1024        sibling groups wider than this train on a sampled softmax
``LEVEL_CONTRAST``            0.1         path-local training's in-batch level term
``DAG_LEVEL_CONTRAST``        0.3         the same for label sets
``UNIT_ROWS_TOLERANCE``       2e-3        dense rows count as normalised within this of length 1
============================  ==========  =============================================================
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Default", "TABLE", "row"]


class Default(NamedTuple):
    """One default: its constant's ``name``, ``value``, the ``rule`` that applies it and the
    ``evidence``, a documentation section as ``page.md#anchor``."""

    name: str
    value: float
    rule: str
    evidence: str


# --- The answer model: which terms are tried, how their weights are learnt -------------------

#: The linear re-ranking terms (the flat SVM, then the path-level SVM) are tried only where the
#: sum of their estimated costs (:mod:`.fitting._costs`) is at most this share of the network's
#: own estimated fit. From the fit-time target of small taxonomies, 3x the network alone: a fit
#: that learns its weights by cross-fitting trains the network about twice (the final fit, and
#: two folds on half the rows each) and fits the terms about twice (the folds' and the final),
#: 1 + 1 + 2 x 0.5 = 3. Where the weights are learnt on the calibration share (2,000 rows and
#: more) the terms cost at most half a network more; on taxonomies of thousands of classes no
#: linear term comes within the budget.
TERM_BUDGET = 0.5

#: liblinear's effective passes over the non-zeros in the flat SVMs' cost estimates: the
#: geometric mean, over WordNet subtrees of a hundred to thousands of classes, of the measured
#: seconds of the SVM against every row over the network's, divided by the ratio of their
#: estimates at one pass (it also counts that one of liblinear's multiply-adds takes longer than
#: one of the fused training step's; ``benchmarks/bench_term_costs.py``, ``docs/performance.md``,
#: "Small taxonomies").
SVM_PASSES = 27.0

#: The fixed cost of one target's ``LinearSVC`` in the SVM of the candidates, in the estimates'
#: multiply-adds: the measured time per target over the network's seconds per estimated
#: multiply-add, the largest over the measured subtrees (``benchmarks/bench_term_costs.py``): it
#: varies several-fold between them, and an estimate that counts too little breaks the
#: fit-time targets where one that counts too much only leaves the term out.
SVM_TARGET_COST = 4e6

#: What one multiply-add of decoding (the SVM of the candidates decodes every training row's
#: most probable answers) costs against one of the training step's, in the estimates: the
#: geometric mean of the measured decoding seconds over the network's, divided by the ratio of
#: their estimates (``benchmarks/bench_term_costs.py``).
DECODE_SHARE = 0.05

#: What one multiply-add of the least-squares SVM's solve (the Gram matrix, its factorisation,
#: the right-hand sides: dense linear algebra) costs against one of the training step's, in the
#: estimates: the geometric mean of the measured seconds of the path-level term's one system over
#: the network's, divided by the ratio of their estimates, over WordNet subtrees of a hundred to
#: several hundred classes (``benchmarks/bench_term_costs.py``).
SOLVE_SHARE = 0.12

#: Folds of the cross-fitting: two more fits on half the rows each, about the network's own fit
#: again (three folds cost half as much again and were no more accurate on small subtrees).
FOLDS = 2

#: Cross-fitting learns the weights on fits of fewer rows than this; from it,
#: ``calibration="auto"``'s share (5%) holds out the 100 rows the calibrator needs, and the
#: weights are learnt there at no cost beyond decoding them.
CROSS_FIT_MAX_ROWS = 2000

#: A term whose gain in held-out log-likelihood is under this many nats is dropped: half the
#: chi-squared critical value of one degree of freedom at 5% (3.84 / 2), a likelihood-ratio test.
MIN_GAIN = 1.92

#: The L2 penalty on each term's weight (on its score standardised over the candidates), pulling
#: a term that does not help towards 0.
PENALTY = 1.0

#: The joint fit needs at least this many held-out rows whose right answer is a candidate.
JOINT_MIN_ROWS = 20

# --- The terms ----------------------------------------------------------------------------------

#: Each class prototype keeps its largest this many feature sums: on the gloss benchmarks 32
#: answered as well as all of them.
PROTOTYPE_FEATURES = 32

#: The largest weight the prototypes' own single-term fit gives (nats per unit of cosine).
PROTOTYPES_MAX_WEIGHT = 64.0

#: The prototypes' single-term fit needs this many held-out rows whose answer is a candidate.
PROTOTYPES_MIN_ROWS = 20

#: The prototypes' weight before the answer model learns it (the weight the held-out candidates
#: are decoded with while the terms are scored); within the range learnt on the gloss benchmarks.
PROTOTYPES_START_WEIGHT = 16.0

#: Shrinkage of the Gaussian prototypes' per-class variances towards the pooled variance.
GAUSSIAN_SHRINKAGE = 1.0

#: The largest weight the Gaussian prototypes' single-term fit gives (per nat of
#: log-likelihood): above every weight fitted on the synthetic benchmarks.
GAUSSIAN_MAX_WEIGHT = 1024.0

#: The Gaussian prototypes' weight before the answer model learns it: the log-likelihood added
#: to the network's log-probability as it is (the network's distribution as the prior of Bayes' rule).
GAUSSIAN_START_WEIGHT = 1.0

#: The flat term's margin of a candidate that was no training target: the hinge loss's target
#: for every negative class, neither favoured nor ruled out.
NO_TARGET_MARGIN = -1.0

#: The least-squares SVM's ridge penalty: ``LinearSVC``'s ``C=1`` in the same objective.
LEAST_SQUARES_PENALTY = 0.5

# --- Calibration --------------------------------------------------------------------------------

#: ``calibration="auto"`` holds rows out once the share would hold at least this many.
CALIBRATION_MIN_AUTO_ROWS = 100

#: With at least this many epochs, the held-out rows join the last epoch after the map is fitted.
CALIBRATION_REJOIN_EPOCHS = 5

#: The calibrator is fitted on at least this many held-out rows.
CALIBRATION_MIN_ROWS = 20

#: Probabilities are clipped this far from 0 and 1 before the calibrator's logit.
CALIBRATION_CLIP = 1e-7

# --- Training -----------------------------------------------------------------------------------

#: ``batch_size="auto"``: training batches of this many rows, and prediction batches always.
BATCH_SIZE = 256

#: The text model's batch is halved (down to :data:`MIN_BATCH_SIZE`) while an epoch would have
#: fewer than this many steps: on a few hundred rows smaller batches train a more accurate model.
MIN_STEPS_PER_EPOCH = 4

#: The smallest batch ``batch_size="auto"`` gives.
MIN_BATCH_SIZE = 32

#: ``softmax_sample="auto"``: sibling groups wider than this many columns train on a sampled
#: softmax of this many candidates (above WordNet's widest noun group, so all nouns stay exact).
SOFTMAX_SAMPLE = 1024

#: ``level_contrast`` of path-local training: against 0.3, 0.1 gains exact accuracy on every
#: WordNet gloss subset measured for a small loss of hF1 on some.
LEVEL_CONTRAST = 0.1

#: The same term for the multi-label (DAG) classifier, where 0.1 loses.
DAG_LEVEL_CONTRAST = 0.3

#: How far from 1 the squared length of every row of a dense X may be for the rows to count as
#: normalised (float32 rounding of a normalised vector is far below it).
UNIT_ROWS_TOLERANCE = 2e-3

_SMALL = "performance.md#small-taxonomies"

#: Every default above, one row each.
TABLE: tuple[Default, ...] = (
    Default("TERM_BUDGET", TERM_BUDGET, "the linear terms (flat SVM, path-level SVM) are tried where their estimated "
            "costs together are at most this share of the network's estimated fit; flat_term='auto' and "
            "path_term='auto'", _SMALL),
    Default("SVM_PASSES", SVM_PASSES, "the flat SVMs' cost estimates: targets (or candidates + 1) x non-zeros x this",
            _SMALL),
    Default("SVM_TARGET_COST", SVM_TARGET_COST, "the SVM of the candidates' cost estimate: this per target", _SMALL),
    Default("DECODE_SHARE", DECODE_SHARE, "the SVM of the candidates' cost estimate: its decoding's multiply-adds "
            "count this share of a training one", _SMALL),
    Default("SOLVE_SHARE", SOLVE_SHARE, "the least-squares SVMs' cost estimates: their multiply-adds count this "
            "share of a training one", _SMALL),
    Default("FOLDS", FOLDS, "folds of the cross-fitting that learns the weights where no rows are held out", _SMALL),
    Default("CROSS_FIT_MAX_ROWS", CROSS_FIT_MAX_ROWS, "fits of fewer rows learn the weights by cross-fitting; "
            "larger ones on the calibration share", "prototypes.md#weights-learnt-on-held-out-rows"),
    Default("MIN_GAIN", MIN_GAIN, "a term whose held-out gain (nats) is under this is dropped",
            "prototypes.md#weights-learnt-on-held-out-rows"),
    Default("PENALTY", PENALTY, "L2 penalty of each standardised term weight in the joint fit",
            "prototypes.md#weights-learnt-on-held-out-rows"),
    Default("JOINT_MIN_ROWS", JOINT_MIN_ROWS, "the joint fit's minimum of usable held-out rows; fewer: the terms "
            "left at 'auto' are not built", "prototypes.md#weights-learnt-on-held-out-rows"),
    Default("PROTOTYPE_FEATURES", PROTOTYPE_FEATURES, "feature sums kept per cosine prototype",
            "prototypes.md#two-kinds-of-prototype"),
    Default("PROTOTYPES_MAX_WEIGHT", PROTOTYPES_MAX_WEIGHT, "upper bound of the prototypes' single-term weight fit",
            "prototypes.md#how-the-answer-is-re-ranked"),
    Default("PROTOTYPES_MIN_ROWS", PROTOTYPES_MIN_ROWS, "held-out rows the prototypes' single-term fit needs",
            "prototypes.md#how-the-answer-is-re-ranked"),
    Default("PROTOTYPES_START_WEIGHT", PROTOTYPES_START_WEIGHT, "prototypes='auto' before the answer model learns "
            "its weight", "prototypes.md#how-the-answer-is-re-ranked"),
    Default("GAUSSIAN_SHRINKAGE", GAUSSIAN_SHRINKAGE, "the Gaussian prototypes' variance shrinkage (dense rows)",
            "prototypes.md#two-kinds-of-prototype"),
    Default("GAUSSIAN_MAX_WEIGHT", GAUSSIAN_MAX_WEIGHT, "upper bound of the Gaussian prototypes' single-term weight fit",
            "prototypes.md#two-kinds-of-prototype"),
    Default("GAUSSIAN_START_WEIGHT", GAUSSIAN_START_WEIGHT, "the Gaussian prototypes before the answer model learns "
            "their weight", "prototypes.md#two-kinds-of-prototype"),
    Default("NO_TARGET_MARGIN", NO_TARGET_MARGIN, "the flat term's margin of a candidate no training row names",
            "prototypes.md#a-flat-linear-term-beside-the-prototypes"),
    Default("LEAST_SQUARES_PENALTY", LEAST_SQUARES_PENALTY, "the least-squares SVM of dense rows (LinearSVC's C=1)",
            "prototypes.md#a-flat-linear-term-beside-the-prototypes"),
    Default("CALIBRATION_MIN_AUTO_ROWS", CALIBRATION_MIN_AUTO_ROWS, "calibration='auto' holds rows out from this "
            "many", "calibration.md#what-fit-does"),
    Default("CALIBRATION_REJOIN_EPOCHS", CALIBRATION_REJOIN_EPOCHS, "held-out rows rejoin the last epoch from this "
            "many epochs", "calibration.md#what-fit-does"),
    Default("CALIBRATION_MIN_ROWS", CALIBRATION_MIN_ROWS, "the calibrator's minimum of held-out rows",
            "calibration.md#what-fit-does"),
    Default("CALIBRATION_CLIP", CALIBRATION_CLIP, "probabilities clipped before the calibrator's logit",
            "calibration.md#why-this-scheme"),
    Default("BATCH_SIZE", BATCH_SIZE, "batch_size='auto'; prediction batches", "classifier.md#training"),
    Default("MIN_STEPS_PER_EPOCH", MIN_STEPS_PER_EPOCH, "batch_size='auto' halves the text model's batch until an "
            "epoch has this many steps", _SMALL),
    Default("MIN_BATCH_SIZE", MIN_BATCH_SIZE, "the smallest batch batch_size='auto' gives", _SMALL),
    Default("SOFTMAX_SAMPLE", SOFTMAX_SAMPLE, "softmax_sample='auto'", "performance.md#wide-sibling-groups"),
    Default("LEVEL_CONTRAST", LEVEL_CONTRAST, "path-local training's level_contrast", "classifier.md#training"),
    Default("DAG_LEVEL_CONTRAST", DAG_LEVEL_CONTRAST, "the multi-label classifier's level_contrast",
            "dag.md#several-labels-per-sample-multilabelhierarchicalclassifier"),
    Default("UNIT_ROWS_TOLERANCE", UNIT_ROWS_TOLERANCE, "dense rows of unit length get the linear text model and "
            "the flat term", "classifier.md#dense-input-embeddings-numeric-features"),
)


def row(name: str) -> Default:
    """The table's row of the default ``name``.

    Examples
    --------
    >>> row("TERM_BUDGET").value
    0.5
    >>> row("FOLDS").evidence
    'performance.md#small-taxonomies'
    """
    for entry in TABLE:
        if entry.name == name:
            return entry
    raise KeyError(f"no default named {name!r}; known: {sorted(entry.name for entry in TABLE)}")
