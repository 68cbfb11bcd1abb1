"""The layering stated in docs/architecture.md, checked on the source: core, agent layer, CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "deepcrew_episodic"
CORE = {
    "_episode",
    "_exceptions",
    "_validate",
    "_unicode",
    "_redact",
    "_recall",
    "_ranking",
    "_index",
    "_stale",
    "_listing",
    "_render",
    "_log",
    "_memory",
    "_options",
    "_query",
    "_shown",
    "_restore",
    "_held",
    "_semantic",
    "_store_reads",
    "_store_cache",
    "_retention",
    "_stats",
    "_grading",
    "_write",
    "_sync_memory",
    "_reflect",
    "_mutex",
    "_litellm",
    "_embed",
    "_vectors",
    "_grade",
    "_source",
    "_distill",
    "_telemetry",
    "_time",
    "_history",
    "providers",
    "testing",
}
AGENT = {
    "_events",
    "_followup",
    "_phases",
    "_hook",
    "_agent",
    "_result",
    "_verify",
    "_refinement",
    "_runner",
}
# The outer layer: commands, the viewer, the framework adapters and the MCP server, on the
# public API of the layers above.
CLI = {"cli", "viewer", "integrations", "mcp_server"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    """The package modules *name* imports, every import statement included (TYPE_CHECKING,
    inside functions), as dotted names relative to the package."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    base = name.split(".") if name else []
    if not is_package:
        base = base[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = [*anchor, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.startswith("deepcrew_episodic"):
                target = node.module.split(".")[1:]
            else:
                continue
            found.add(".".join(target))
            found.update(".".join([*target, alias.name]) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("deepcrew_episodic."):
                    found.add(alias.name.split(".", 1)[1])
    modules = _modules()
    return {m for m in found if m in modules and m != name}


def _layer(module: str) -> str:
    top = module.split(".")[0]
    if top in CORE:
        return "core"
    if top in AGENT:
        return "agent"
    if top in CLI or top == "__main__":
        return "cli"
    return "root"  # the package's __init__ re-exports both layers lazily


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in _modules() if m and _layer(m) == "root"]
    assert unplaced == [], "add these to a layer in docs/architecture.md and here"


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m))
def test_no_module_imports_a_later_layer(module: str) -> None:
    order = {"core": 0, "agent": 1, "cli": 2}
    mine = order[_layer(module)]
    path = _modules()[module]
    later = [m for m in _imports(module, path) if m and order.get(_layer(m), -1) > mine]
    assert later == [], f"{module} ({_layer(module)}) imports {later}"


def test_the_package_has_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path) - {""} for name, path in modules.items() if name}
    # a submodule depends on its package's __init__ when it is imported: ignore parent edges
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycle.extend([*stack[stack.index(dep) :], dep] if dep in stack else [node, dep])
                return True
            if state.get(dep) is None and visit(dep, [*stack, dep]):
                return True
        state[node] = 2
        return False

    for node in sorted(graph):
        if state.get(node) is None and visit(node, [node]):
            break
    assert cycle == [], " -> ".join(cycle)


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, deepcrew_episodic\n"
        "from deepcrew_episodic import EpisodicMemory, Episode\n"
        "heavy = [m for m in ('litellm', 'redis', 'pydantic', 'httpx', 'numpy', 'opentelemetry') "
        "if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_memory_without_telemetry_imports_no_opentelemetry_module() -> None:
    # Every traced operation runs once, on a memory built without telemetry.
    code = (
        "import asyncio, sys\n"
        "from deepcrew_episodic import Episode, EpisodicMemory\n"
        "from deepcrew_episodic.providers import InMemoryProvider\n"
        "async def main():\n"
        "    memory = EpisodicMemory(InMemoryProvider(), namespace='n')\n"
        "    stored = await memory.record(Episode(query='rotate the key', outcome='success'))\n"
        "    await memory.recall('rotate the key')\n"
        "    await memory.explain('rotate the key')\n"
        "    await memory.grade(stored.id, outcome='failure')\n"
        "    await memory.used([stored.id])\n"
        "    await memory.forget([stored.id])\n"
        "    await memory.sweep()\n"
        "    await memory.shrink(10)\n"
        "    await memory.clear()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_list_of_the_outcomes_is_the_episode_models() -> None:
    """The outcomes are one fact: the viewer reads the model's, the command line (which
    imports nothing of the library to parse) and the MCP server's schema repeat them."""
    from typing import get_args

    from deepcrew_episodic import Outcome
    from deepcrew_episodic.cli._parse import OUTCOMES as CLI_OUTCOMES
    from deepcrew_episodic.mcp_server._server import Shown
    from deepcrew_episodic.viewer._data import OUTCOMES as VIEWER_OUTCOMES

    model = get_args(Outcome)
    assert model == CLI_OUTCOMES
    assert model == VIEWER_OUTCOMES
    assert set(get_args(Shown)) == set(model)
