"""The package's layers, as its docstring lists them, against every import in the package."""

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


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import of the package in a file, nested ones too."""
    own = "hiclass_parallel." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = own.rsplit(".", 1)[0] if path.name != "__init__.py" else own.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target] if node.module else [f"{target}.{alias.name}" for alias in node.names]
            found += [(node.lineno, t) for t in targets]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, t) for line, t in found if t.startswith("hiclass_parallel")]


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
