"""The package's layers, as its docstring lists them, against every import in the package; inside
``estimators/``, its parts in the order the docstring of :mod:`hiclass_parallel.estimators` lists.

Run as a script (``python tests/test_layers.py``), it prints the folder-to-folder import graph of
``hiclass_parallel/estimators``: each arrow with its count of imports (module-level and
function-local), and the arrows that run against the order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hiclass_parallel

PACKAGE = Path(hiclass_parallel.__file__).resolve().parent


def layers() -> dict[str, int]:
    """``{component: layer}`` from the numbered list of ``hiclass_parallel.__doc__``."""
    rank = {}
    for number, line in re.findall(r"^(\d+)\. (.*)$", hiclass_parallel.__doc__, re.MULTILINE):
        for name in re.findall(r":mod:`~hiclass_parallel\.(\w+)`", line):
            rank[name] = int(number)
    return rank


def component(module: str) -> str | None:
    """The top-level part of the package a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "hiclass_parallel" and len(parts) > 1 else None


def is_module(name: str) -> bool:
    """Whether a dotted name of the package is a module or a sub-package (not a name in one)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import of the package in a file, nested ones too;
    ``from package import module`` counts as an import of the module."""
    return [(line, target) for line, target, _ in imports_with_scope(path)]


def imports_with_scope(path: Path) -> list[tuple[int, str, bool]]:
    """``(line, absolute module, function-local)`` of every import of the package in a file."""
    own = "hiclass_parallel." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = own.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    local = {id(node) for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [f"{target}.{alias.name}" if is_module(f"{target}.{alias.name}") else target
                       for alias in node.names]
            found += [(node.lineno, t, id(node) in local) for t in dict.fromkeys(targets)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in local) for alias in node.names]
    return [(line, t, scope) for line, t, scope in found if t.startswith("hiclass_parallel")]


def test_the_docstring_lists_every_part_of_the_package():
    rank = layers()
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__" and p.stem != "__main__") or (p / "__init__.py").exists()}
    assert parts <= set(rank), f"not in the layer list: {sorted(parts - set(rank))}"


def test_no_layer_imports_a_lower_one():
    rank = layers()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") and path.parent == PACKAGE:
            continue  # the package's face and entry point import everything
        here = component("hiclass_parallel." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        for line, target in imports(path):
            there = component(target)
            if there is None or there == here:
                continue
            if rank[there] >= rank[here]:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} ({here}, layer {rank[here]}) imports {target} (layer {rank[there]})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_folder_of_the_package_holds_more_than_twelve_modules():
    folders = [PACKAGE, *(p.parent for p in PACKAGE.rglob("__init__.py"))]
    crowded = {str(f.relative_to(PACKAGE.parent)): n for f in set(folders)
               if (n := len(list(f.glob("*.py")))) > 12}
    assert not crowded, f"folders with more than 12 Python modules: {crowded}"


def test_the_docstring_maps_every_sub_package_of_the_estimators():
    estimators = PACKAGE / "estimators"
    subs = sorted(p.parent.name for p in estimators.glob("*/__init__.py"))
    assert subs, "the estimators have sub-packages"
    missing = [s for s in subs if f"``estimators/{s}/``" not in hiclass_parallel.__doc__]
    assert not missing, f"sub-packages of estimators/ the package docstring does not name: {missing}"


# ---------------------------------------------------------------------------- inside estimators/
ESTIMATORS = PACKAGE / "estimators"


def inner_layers() -> dict[str, int]:
    """``{part: layer}`` from the numbered list of ``hiclass_parallel.estimators.__doc__``: a
    part is a module or a folder directly under ``estimators/``, written ````name```` or
    ````name/```` before the line's ``--``."""
    import hiclass_parallel.estimators as estimators

    rank = {}
    for number, line in re.findall(r"^(\d+)\. (.*)$", estimators.__doc__, re.MULTILINE):
        for name in re.findall(r"``(\w+)/?``", line.split(" -- ")[0]):
            rank[name] = int(number)
    return rank


def inner_part(module: str) -> str | None:
    """The module or folder directly under ``estimators/`` a dotted module name belongs to
    (``None`` outside ``estimators/`` and for its face, ``estimators/__init__.py``)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["hiclass_parallel", "estimators"] and len(parts) > 2 else None


def inner_imports() -> list[tuple[str, int, str, str, str, bool]]:
    """``(file, line, part, target, target's part, function-local)`` of every import from one
    part of ``estimators/`` into another (the face ``estimators/__init__.py`` included, as a
    part of its own named ``__init__``)."""
    found = []
    for path in sorted(ESTIMATORS.rglob("*.py")):
        module = "hiclass_parallel." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        here = inner_part(module) or "__init__"
        for line, target, local in imports_with_scope(path):
            there = inner_part(target)
            if there is not None and there != here:
                found.append((str(path.relative_to(PACKAGE.parent)), line, here, target, there, local))
    return found


def test_the_estimators_docstring_lists_every_part_of_the_estimators():
    rank = inner_layers()
    parts = {p.stem if p.is_file() else p.name for p in ESTIMATORS.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert parts <= set(rank), f"not in the list of hiclass_parallel.estimators.__doc__: {sorted(parts - set(rank))}"
    assert set(rank) <= parts, f"listed in hiclass_parallel.estimators.__doc__ but absent: {sorted(set(rank) - parts)}"


def test_no_part_of_the_estimators_imports_a_higher_one():
    rank = inner_layers()
    wrong = [f"{file}:{line} ({here}, layer {rank[here]}) imports {target} ({there}, layer {rank[there]})"
             f"{' inside a function' if local else ''}"
             for file, line, here, target, there, local in inner_imports()
             if here != "__init__" and rank[there] >= rank[here]]
    assert not wrong, "imports against the order of hiclass_parallel.estimators.__doc__:\n" + "\n".join(wrong)


def test_other_folders_of_the_estimators_are_reached_through_their_face():
    # A folder's face (its __init__.py) names what other folders may use; its other modules are
    # its own business, free to move.
    wrong = [f"{file}:{line} ({here}) imports {target}, not the face hiclass_parallel.estimators.{there}"
             for file, line, here, target, there, _ in inner_imports()
             if (ESTIMATORS / there).is_dir() and target != f"hiclass_parallel.estimators.{there}"]
    assert not wrong, "imports past a folder's face:\n" + "\n".join(wrong)


def folder_graph() -> str:
    """The folder-to-folder import graph of ``estimators/``, lowest part first: each arrow with
    its count of module-level and function-local imports, ``AGAINST THE ORDER`` where it runs
    from a lower part to a higher one (or between two parts of one line)."""
    rank = inner_layers()
    arrows: dict[tuple[str, str], list[int]] = {}
    for _, _, here, _, there, local in inner_imports():
        arrows.setdefault((here, there), [0, 0])[local] += 1
    lines = []
    for (here, there), (top, local) in sorted(arrows.items(), key=lambda a: (rank.get(a[0][0], 99), a[0])):
        against = here != "__init__" and rank[there] >= rank[here]
        lines.append(f"{here:>13} -> {there:<13} {top:3d} module-level {local:3d} function-local"
                     f"{'   AGAINST THE ORDER' if against else ''}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(folder_graph())
