"""The package's layering: a module imports only modules of lower layers (``icl_utils.LAYERS``), or of its own
package below it, so data and dependencies flow one way."""

import ast
from pathlib import Path

import pytest

import icl_utils

PACKAGE = Path(icl_utils.__file__).parent


def layer_of(module: str) -> str:
    """``icl_utils.tasks.linear`` -> ``tasks``."""
    return module.split(".")[1]


def imports(path: Path) -> list[str]:
    """Every ``icl_utils`` module that ``path`` imports, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("icl_utils"):
            if node.module == "icl_utils":
                found += [f"icl_utils.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("icl_utils.")]
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_every_module_has_a_layer():
    names = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES}
    assert names == set(icl_utils.LAYERS)


def violations(path: Path, own: str) -> list[str]:
    """The imports of ``path`` (a module of layer ``own``) that point up, or into its own package's __init__."""
    rank = icl_utils.LAYERS.index
    bad = []
    for module in imports(path):
        other = layer_of(module)
        if other not in icl_utils.LAYERS:
            continue
        if rank(other) > rank(own) or (other == own and module.count(".") < 2 and path.name != "__init__.py"):
            bad.append(module)
    return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    assert violations(path, own) == []


def test_the_check_fails_on_an_upward_import(tmp_path):
    """The control: a module of a low layer that imports a high one, at the top or inside a function, is caught."""
    bad = tmp_path / "checks.py"
    bad.write_text("from icl_utils.train import train\n\ndef f():\n    from icl_utils import plotting\n")
    assert violations(bad, "checks") == ["icl_utils.train", "icl_utils.plotting"]
