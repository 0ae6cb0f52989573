"""
Your own taxonomy: product titles into a category tree
=======================================================

A worked example on a taxonomy of your own, end to end: a small product catalogue whose
categories form a tree, product titles as the input, and each product's category given at any
depth. Everything is written in this file; nothing is downloaded.

It shows how to build the tree from ``(child, parent)`` pairs or from label paths, train a
``TfidfVectorizer`` + :class:`~hiclass_parallel.estimators.HierarchicalClassifier` pipeline,
read its answers as paths of your own category names, and score them with hierarchical
metrics, which give partial credit to an answer that gets the upper levels right.

Run: ``python examples/product_taxonomy.py`` (seconds).
"""

# %%
# The taxonomy
# ------------
# Three top-level departments, two levels below them. The root is implicit: every department
# is a top-level class. ``Tree.from_edges`` takes ``(child, parent)`` pairs, ``None`` as the
# parent of a top-level class.
from hiclass_parallel import Tree

EDGES = [
    ("Electronics", None), ("Home", None), ("Clothing", None),
    ("Phones", "Electronics"), ("Computers", "Electronics"), ("Audio", "Electronics"),
    ("Smartphones", "Phones"), ("Phone cases", "Phones"),
    ("Laptops", "Computers"), ("Monitors", "Computers"),
    ("Headphones", "Audio"), ("Speakers", "Audio"),
    ("Kitchen", "Home"), ("Furniture", "Home"),
    ("Cookware", "Kitchen"), ("Coffee makers", "Kitchen"),
    ("Chairs", "Furniture"), ("Tables", "Furniture"),
    ("Tops", "Clothing"), ("Shoes", "Clothing"),
    ("T-shirts", "Tops"), ("Sweaters", "Tops"),
    ("Running shoes", "Shoes"), ("Boots", "Shoes"),
]
tree = Tree.from_edges(EDGES)
print(tree)
print("path of 'Cookware':", " > ".join(tree.path_labels("Cookware")))

# %%
# The data: product titles and their categories
# ---------------------------------------------
# Most products carry their finest category; a few only a coarser one ("Kitchen": some
# kitchen item, its finer category unknown). Labels at any depth are normal input: the
# classifier trains each product on the levels its label reaches.
CATALOGUE = {
    "Smartphones": ["unlocked smartphone 128 gb dual sim", "5g smartphone with triple camera",
                    "android smartphone 6.5 inch display", "refurbished smartphone 64 gb",
                    "compact smartphone with long battery life", "flagship smartphone 256 gb"],
    "Phone cases": ["silicone phone case with camera cover", "leather wallet phone case",
                    "clear shockproof phone case", "rugged phone case with kickstand",
                    "magnetic phone case slim", "phone case with card holder"],
    "Laptops": ["14 inch laptop 16 gb ram", "gaming laptop with rtx graphics",
                "thin and light laptop aluminium", "2 in 1 convertible laptop touchscreen",
                "business laptop with backlit keyboard", "student laptop 8 gb ram ssd"],
    "Monitors": ["27 inch 4k monitor ips", "curved gaming monitor 144 hz",
                 "24 inch office monitor full hd", "portable usb-c monitor 15.6 inch",
                 "ultrawide monitor 34 inch", "monitor with built-in speakers and hdmi"],
    "Headphones": ["wireless noise cancelling headphones", "over-ear studio headphones",
                   "bluetooth headphones with microphone", "kids headphones volume limited",
                   "foldable on-ear headphones", "gaming headset headphones with mic"],
    "Speakers": ["portable bluetooth speaker waterproof", "smart speaker with voice assistant",
                 "bookshelf speakers pair", "soundbar speaker for tv",
                 "party speaker with lights", "mini speaker for shower"],
    "Cookware": ["non-stick frying pan 28 cm", "cast iron skillet pan",
                 "stainless steel saucepan with lid", "cookware set pots and pans",
                 "enamelled dutch oven pot", "wok pan with glass lid"],
    "Coffee makers": ["espresso machine with milk frother", "drip coffee maker 12 cup",
                      "french press coffee maker glass", "capsule coffee machine",
                      "bean to cup coffee machine", "cold brew coffee maker jar"],
    "Chairs": ["ergonomic office chair mesh", "wooden dining chair set of 2",
               "velvet armchair for living room", "folding chair padded",
               "gaming chair with footrest", "bar stool chair adjustable"],
    "Tables": ["oak dining table for six", "round coffee table glass",
               "extendable kitchen table", "standing desk table adjustable",
               "side table with drawer", "folding camping table"],
    "T-shirts": ["cotton crew neck t-shirt", "slim fit t-shirt pack of 3",
                 "graphic print t-shirt oversized", "v-neck t-shirt organic cotton",
                 "long sleeve t-shirt", "sports t-shirt quick dry"],
    "Sweaters": ["merino wool sweater crew neck", "cable knit sweater chunky",
                 "cashmere sweater v-neck", "hooded sweater zip",
                 "cardigan sweater with buttons", "turtleneck sweater ribbed"],
    "Running shoes": ["lightweight mesh running shoes", "waterproof trail running shoes",
                      "cushioned road running shoes", "racing running shoes carbon plate",
                      "running shoes wide fit", "barefoot minimalist running shoes"],
    "Boots": ["leather chelsea boots", "waterproof hiking boots",
              "winter snow boots lined", "steel toe work boots",
              "ankle boots with heel", "rain boots rubber"],
    # Coarse labels: the finer category is unknown.
    "Kitchen": ["kitchen utensil set silicone", "kitchen scale digital"],
    "Audio": ["audio cable 3.5 mm jack", "usb audio adapter"],
    "Clothing": ["gift card for clothing", "clothing storage bags"],
}
texts = [text for texts_of in CATALOGUE.values() for text in texts_of]
labels = [label for label, texts_of in CATALOGUE.items() for _ in texts_of]
print(f"{len(texts)} products, {len(set(labels))} distinct labels, {tree.n_classes} classes in the tree")

# %%
# Train a pipeline
# ----------------
# Text in, category paths out. With a sparse ``X`` (TF-IDF) the classifier picks its text
# route by itself: a sparse input layer, a softmax over each category's children, and exact
# decoding of the best path. ``random_state`` makes the fit repeatable.
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from hiclass_parallel import HierarchicalClassifier

X_train, X_test, y_train, y_test = train_test_split(texts, labels, test_size=0.25, random_state=0)
model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                      HierarchicalClassifier(tree, random_state=0))
model.fit(X_train, y_train)

# %%
# Answers as paths of your own names
# ----------------------------------
# ``predict`` gives each product's whole path, top level first, right-padded with ``""``. A
# prediction is always a valid path of the tree: never a "laptop" under "Kitchen".
new_products = ["wireless gaming headphones", "cast iron casserole pot", "wool sweater for winter",
                "standing desk", "hiking boots waterproof leather"]
for product, path in zip(new_products, model.predict(new_products)):
    print(f"{product:>28}: {' > '.join(label for label in path if label)}")

# %%
# The classifier sits last in the pipeline; its own methods take the transformed ``X``. The
# three most probable paths of an ambiguous title, with their probabilities:
import numpy as np

clf, vectorize = model[-1], model[:-1]
top3, log_prob = clf.predict_top_k(vectorize.transform(["laptop speakers"]), 3, return_log_prob=True)
for path, lp in zip(top3[0], log_prob[0]):
    print(f"{np.exp(lp):.2f}  {' > '.join(label for label in path if label)}")

# %%
# Hierarchical metrics
# --------------------
# Hierarchical F1 counts the nodes a prediction shares with the true path, so "Electronics >
# Audio > Speakers" for a pair of headphones is partly right; exact accuracy is not. The
# report gives the accuracy per level.
from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_classification_report

predicted = model.predict(X_test)
print(f"hierarchical F1 {model.score(X_test, y_test):.3f}, "
      f"exact {exact_path_accuracy_score(y_test, predicted, tree):.3f}")
print(hierarchical_classification_report(y_test, predicted, tree))

# %%
# The same model from label paths
# -------------------------------
# Without a tree, give each label as its path from the top level down (right-padded with
# ``""``, or ``None``): the tree is learnt from the paths in ``fit``.
paths = [tree.path_labels(label) for label in y_train]
width = max(len(path) for path in paths)
padded = [path + [""] * (width - len(path)) for path in paths]
from_paths = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                           HierarchicalClassifier(random_state=0)).fit(X_train, padded)
print(from_paths[-1].tree_)
print(from_paths.predict(["espresso machine"])[0])

# %%
# Accuracy per level
# ------------------
# The upper levels are easier: a department is learnt from every product below it.
import matplotlib.pyplot as plt

from hiclass_parallel.metrics.plot import plot_level_accuracy

ax = plot_level_accuracy(y_test, predicted, tree)
ax.set_title("held-out products: accuracy per level")
plt.show()
