"""No module of silodp imports another in a circle (module-level or inside functions): the graph
of ``import`` statements between silodp's modules has no cycle, the algorithm layer's included."""

import ast
import pathlib

import silodp

ROOT = pathlib.Path(silodp.__file__).parent


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, name: str, modules: set) -> set:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in modules and t != name}
    return out


def _graph() -> dict:
    paths = {_module(p): p for p in ROOT.rglob("*.py")}
    return {name: _imports(path, name, set(paths)) for name, path in paths.items()}


def _cycle(graph: dict, roots) -> list | None:
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue  # a package and its own submodules
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for r in roots:
        if r not in state and (found := visit(r)):
            return found
    return None


def test_the_algorithm_layer_imports_in_no_circle():
    graph = _graph()
    algorithms = sorted(n for n in graph if n.startswith("silodp.algorithms.") and n != "silodp.algorithms")
    sub = {n: {m for m in graph[n] if m in algorithms} for n in algorithms}
    assert _cycle(sub, algorithms) is None
    assert not {m for m in graph["silodp.algorithms.registry"] if m.startswith("silodp.algorithms")}, \
        "the registry imports no algorithm module"


def test_no_module_of_silodp_imports_in_a_circle():
    """The whole package, e.g. accounting.pvec -> pvec_l2 -> pvec_protocol, never back."""
    graph = _graph()
    assert _cycle(graph, sorted(graph)) is None
    assert "silodp.accounting.pvec" not in graph["silodp.accounting.pvec_l2"]
