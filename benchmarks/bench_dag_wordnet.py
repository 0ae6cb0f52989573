"""How much WordNet 3.0 grows when unrolled with every hypernym.

The shipped tree keeps one parent per synset. This reads every hypernym pointer from the
official dictionary files (``data.noun``, ``data.verb``; adjectives and adverbs have none),
builds a :class:`hiclass_parallel.dag.Dag` and counts the classes of the unrolled tree (one
copy per distinct ancestral path), then unrolls it to time that and read its depth.

Pointer rules compared:

- ``first``: the shipped rule (the first ``@`` pointer, else the first ``@i``): a tree, the check;
- ``hypernyms``: every ``@`` (hypernym) pointer; ``@i`` (instance hypernym) pointers only
  when a synset has no ``@``;
- ``all``: every ``@`` and every ``@i`` pointer.

Usage: ``python -m benchmarks.bench_dag_wordnet [--path DIR] [--out benchmarks/results/dag_wordnet.json]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RULES = ("first", "hypernyms", "all")


def read_pointers(folder: Path, suffix: str) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """Keys ``"{suffix}:{offset}"``, their ``@`` targets and their ``@i`` targets, in file order."""
    keys, hyper, inst = [], [], []
    pos_file = {"n": "noun", "v": "verb"}
    with open(folder / f"data.{suffix}", encoding="utf-8") as raw:
        for line in raw:
            if line.startswith(" ") or not line.strip():
                continue  # the licence header
            fields = line.split(" | ", 1)[0].split()
            i = 4 + 2 * int(fields[3], 16)
            h, s = [], []
            for _ in range(int(fields[i])):
                symbol, offset, pos = fields[i + 1], fields[i + 2], fields[i + 3]
                i += 4
                if symbol in ("@", "@i"):
                    (h if symbol == "@" else s).append(f"{pos_file[pos]}:{int(offset)}")
            keys.append(f"{suffix}:{int(fields[0])}")
            hyper.append(h)
            inst.append(s)
    return keys, hyper, inst


def parents_under(rule: str, hyper: list[str], inst: list[str]) -> list[str]:
    if rule == "first":
        return (hyper or inst)[:1]
    if rule == "hypernyms":
        return hyper or inst
    return hyper + inst


def measure(keys, hyper, inst, rule: str, max_nodes: int) -> dict:
    from hiclass_parallel.dag import Dag

    index = {k: i for i, k in enumerate(keys)}
    parents = [[index[p] for p in parents_under(rule, h, s)] for h, s in zip(hyper, inst)]
    t0 = time.perf_counter()
    dag = Dag(list(range(len(keys))), parents)
    counts = np.asarray(dag.n_paths(), dtype=object)
    build = time.perf_counter() - t0
    n_parents = np.diff(dag.parent_offsets)
    total = int(sum(counts))
    out = {
        "rule": rule,
        "synsets": dag.n_nodes,
        "with_several_parents": int((n_parents > 1).sum()),
        "links": int(dag.n_edges),
        "unrolled_classes": total,
        "growth": round(total / dag.n_nodes, 3),
        "synsets_with_several_paths": int(sum(c > 1 for c in counts)),
        "max_paths_of_one_synset": int(max(counts)),
        "longest_path_levels": int(dag.depth.max()) + 1,
        "dag_seconds": round(build, 2),
    }
    worst = int(np.argmax(np.asarray(counts, dtype=np.float64)))
    out["synset_with_most_paths"] = keys[worst]
    if total <= max_nodes:
        t0 = time.perf_counter()
        unrolled = dag.unroll(max_nodes=max_nodes)
        out["unroll_seconds"] = round(time.perf_counter() - t0, 2)
        out["unrolled_levels"] = unrolled.tree.n_levels
        out["unrolled_tree_mbytes"] = round(unrolled.tree.nbytes / 1e6, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    from hiclass_parallel.datasets.build_wordnet import find_wordnet_data

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=None, help="WordNet dict folder (default: search)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--max-nodes", type=int, default=5_000_000)
    args = parser.parse_args(argv)
    folder = find_wordnet_data(args.path)
    if not folder.is_dir():
        raise SystemExit(f"{folder} is a zip: give --path a dict folder")
    nouns = read_pointers(folder, "noun")
    verbs = read_pointers(folder, "verb")
    n_other = sum(1 for suffix in ("adj", "adv") for line in open(folder / f"data.{suffix}", encoding="utf-8")
                  if line.strip() and not line.startswith(" "))
    results = {"source": str(folder), "nouns": [], "nouns_and_verbs": [], "adjectives_and_adverbs": n_other}
    both = tuple(a + b for a, b in zip(nouns, verbs))
    for rule in RULES:
        for name, data in (("nouns", nouns), ("nouns_and_verbs", both)):
            row = measure(*data, rule, args.max_nodes)
            results[name].append(row)
            print(name, json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
