"""jupyter_hvd/state/ is one import point: every public name of its modules is reachable as `state.<name>`, so
callers never depend on which module holds it."""

from __future__ import annotations

import ast
import inspect

from jupyter_hvd import state
from jupyter_hvd.state import actions, pool_files, private, processes, schema


def defined_names(module: object) -> set[str]:
    """The public names a module defines at its top level (functions, classes, constants)."""
    names: set[str] = set()
    for node in ast.parse(inspect.getsource(module)).body:  # type: ignore[arg-type]
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_")}


def test_every_public_name_of_the_state_modules_is_re_exported():
    for module in (schema, private, processes, pool_files, actions):
        missing = sorted(n for n in defined_names(module) if n not in state.__all__ or not hasattr(state, n))
        assert not missing, f"{module.__name__} defines {', '.join(missing)}: re-export it in state/__init__.py"
    assert set(state.__all__) == set().union(*map(defined_names, (schema, private, processes, pool_files, actions)))
