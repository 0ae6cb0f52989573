"""
Why an answer, and new classes without training again
=======================================================

A text classifier on WordNet's dog breeds (glosses with their lemma names, shipped with the
package): place a breed under its hypernym from its definition. Two things a user of a
changing taxonomy needs, shown on it:

- **why** an answer was given: for each node on the predicted path, the words that raised it
  over its strongest rival, exact for the default text model (its contributions add up to the
  score margin);
- **growing** the taxonomy: a class and its children are added to the fitted model's tree,
  which answers with them at once and learns them from their few rows, keeping what it knew.

Run: ``python examples/explain_and_grow.py`` (seconds).
"""

# %%
# The data, with one class held back
# ----------------------------------
# Each row is a synset's gloss, its label the synset's parent. One class (the target with the
# most children that are all leaves) and its children are left out of the tree the model is
# fitted on, and so are the rows labelled with it: they stand for a category added later.
import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline

from hiclass_parallel import Tree
from hiclass_parallel.datasets import load_wordnet_glosses
from hiclass_parallel.estimators import HierarchicalClassifier, explain_classes, explain_predictions

data = load_wordnet_glosses("dog.n.01", include_lemmas=True)
tree, texts, target = data.tree, np.asarray(data.data, dtype=object), np.asarray(data.target)
leafy = [c for c in range(tree.n_classes) if not tree.is_leaf[c] and tree.is_leaf[tree.children(c)].all()]
held = max(leafy, key=lambda c: tree.children(c).size)
removed = {held, *tree.children(held).tolist()}
keep = [c for c in range(tree.n_classes) if c not in removed]
new_id = {old: i for i, old in enumerate(keep)}
small = Tree.from_parents([new_id.get(int(tree.parents[c]), -1) for c in keep], labels=tree.labels[keep].tolist())
is_new = np.isin(tree.to_ids(target), list(removed))
print(f"{tree.n_classes} classes; held back {tree.labels[held]!r} and its {len(removed) - 1} children, "
      f"{is_new.sum()} rows")

# %%
# Fit, and explain an answer
# --------------------------
# ``describe`` gives a line per step of the path: the node, its strongest rival in the same
# softmax group, the margin, the words that carried it, the bias share and the other words'
# part; then the answer's final score split into the model's log-probability and the
# re-ranking terms. ``plot`` draws the same as one bar chart per step.
model = make_pipeline(TfidfVectorizer(sublinear_tf=True),
                      HierarchicalClassifier(small, semantics="terminal", random_state=0))
model.fit(texts[~is_new], target[~is_new])
answers = model[-1].predict_node(model[0].transform(texts[:30]))
row = int(np.argmax(model[-1].tree_.depth[answers]))  # the deepest answer among the first rows
why = explain_predictions(model, texts[row:row + 1], top=4)
print("Explaining:", texts[row][:70], "...")
print(why.describe(0))
steps = why.columns[0] >= 0
gap = why.bias + why.contributions.sum(axis=2) + why.rest - why.margins
margins_add_up = bool(np.allclose(np.nan_to_num(gap[0][steps]), 0.0, atol=1e-3))
figure = why.plot(0)

# %%
# The words that raise a class in general, read from the weights:
first = model[-1].tree_.labels[answers[row]]
print(f"words for {first}:", [word for word, _ in explain_classes(model, [first], top=6).top(first)])

# %%
# Grow the tree
# -------------
# The full tree keeps every fitted class under its parent and adds the held-back ones. Their
# output rows start from their lemma names (class text, in the vectorizer's space); then they
# train on their rows, beside a replay of the old classes' prototypes. Only the new rows train:
# the old classes score as they did (the flat term of the re-ranking, which knows none of the
# new classes, is dropped with a warning, and may move an old answer).
vectorizer, clf = model[0], model[-1]
names = [str(label).split(".")[0].replace("_", " ") for label in tree.labels]
held_rows, old_rows = vectorizer.transform(texts[is_new]), vectorizer.transform(texts[~is_new])
before_new, before_old = clf.predict(held_rows), clf.predict(old_rows)
clf.grow(tree, held_rows, target[is_new], class_features=vectorizer.transform(names))
right_after = float(np.mean(clf.tree_.labels[clf.predict_node(held_rows)] == target[is_new]))
kept = float(np.mean(clf.predict(old_rows)[:, : before_old.shape[1]] == before_old))
print(f"grown: {clf.grown_['initialised_from']}")
print(f"the held-back rows (learnt from) answered right: {right_after:.2f}; old rows answered as before: {kept:.2f}")
