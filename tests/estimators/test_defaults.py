"""Every default in one table (``estimators/_defaults.py``): each constant has a row, each row names
a section of the documentation, and no module that decides the fit or the answer keeps a number of
its own."""

import ast
import re
from pathlib import Path

import pytest

from hiclass_parallel.estimators import _defaults

ESTIMATORS = Path(_defaults.__file__).parent
DOCS = ESTIMATORS.parents[1] / "docs"
#: The modules whose defaults the table holds: the fit's configuration and costs, the answer model.
SCANNED = sorted([ESTIMATORS / "fitting" / "_config.py", ESTIMATORS / "fitting" / "_costs.py",
                  *(ESTIMATORS / "fitting").glob("_answer*.py"), *(ESTIMATORS / "answer").glob("*.py")])


def _numeric(node: ast.AST) -> bool:
    """A literal number, or arithmetic of literal numbers (``2**22``, ``-1.0``)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    return False


def _defined_numbers(path: Path) -> list[str]:
    """``NAME`` (module level) and ``Class.NAME`` (class level) assigned a literal number."""
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{node.name}.")
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            for target in targets:
                if isinstance(target, ast.Name) and re.fullmatch(r"[A-Z][A-Z0-9_]*", target.id) and _numeric(node.value):
                    found.append(prefix + target.id)

    visit(ast.parse(path.read_text()).body, "")
    return found


def _anchors(page: Path) -> set[str]:
    """MyST's heading anchors of a page (``myst_heading_anchors = 3``)."""
    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"(#{1,3}) (.+)", line)
        if match:
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(2).lower()).strip().replace(" ", "-"))
    return anchors


def test_every_constant_has_one_row_with_its_value():
    constants = {name: getattr(_defaults, name) for name in _defined_numbers(Path(_defaults.__file__))}
    rows = {row.name: row for row in _defaults.TABLE}
    assert len(rows) == len(_defaults.TABLE), "a default has two rows"
    assert sorted(constants) == sorted(rows), "constants without a row, or rows without a constant"
    assert all(rows[name].value == value for name, value in constants.items())
    assert all(row.rule and row.evidence for row in _defaults.TABLE)


def test_the_docstring_table_lists_every_default():
    listed = set(re.findall(r"^``([A-Z][A-Z0-9_]*)``", _defaults.__doc__, flags=re.M))
    assert listed == {row.name for row in _defaults.TABLE}


@pytest.mark.parametrize("row", _defaults.TABLE, ids=lambda row: row.name)
def test_each_row_names_a_section_of_the_docs(row):
    page, _, anchor = row.evidence.partition("#")
    assert (DOCS / page).is_file(), f"{row.name}: no page docs/{page}"
    assert anchor in _anchors(DOCS / page), f"{row.name}: docs/{page} has no section #{anchor}"


@pytest.mark.parametrize("path", SCANNED, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_module_that_decides_keeps_a_number_of_its_own(path):
    assert not _defined_numbers(path), f"{path.name} defines numbers the table of defaults should hold"


def test_the_scan_finds_a_number_where_there_is_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("LIMIT = 2**25\n_PRIVATE = 3\nNAMES = ('a',)\nclass K:\n    WEIGHT: float = 16.0\n")
    assert _defined_numbers(module) == ["LIMIT", "K.WEIGHT"]


def test_row_names_an_unknown_default():
    with pytest.raises(KeyError, match="TERM_BUDGET"):
        _defaults.row("NOT_A_DEFAULT")
