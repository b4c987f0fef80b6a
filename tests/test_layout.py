"""The package's import graph: no cycle among fspo modules, imports inside functions counted too.

Each import statement is an edge from its module to the ``fspo`` module it names (``from fspo.a import b``
names ``fspo.a.b`` when that is a module, else ``fspo.a``); imports under ``if TYPE_CHECKING:`` are
annotations and do not run. The few imports that stay inside functions are listed with why, so a new one
is a decision, not a way around a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fspo

PACKAGE = Path(fspo.__file__).parent

# module -> the fspo modules it imports inside functions, and why they are not at the top.
LAZY_IMPORTS = {
    # Each backend's dependencies (torch, transformers, an HTTP client) load only when that backend is named.
    "fspo.verifiers.backends": {
        "fspo.verifiers.lexical",
        "fspo.verifiers.embedding",
        "fspo.verifiers.hhem",
        "fspo.verifiers.nli",
        "fspo.verifiers.minicheck",
        "fspo.verifiers.factcg",
        "fspo.verifiers.llm_judge",
    },
    # verl imports the CPU plugin while verl itself is being imported; these modules import verl.
    "fspo.cpu.plugin": {"fspo.cpu", "fspo.cpu.patches", "fspo.cpu.platform", "fspo.cpu.rollout"},
    # The config dataclasses and the verifiers import verl (seconds): the tools check their arguments first.
    "fspo.evaluation.cli": {"fspo.config.verifier", "fspo.verifiers"},
    "fspo.verifier_tools.verify": {"fspo.config.verifier", "fspo.verifiers"},
    "fspo.verifier_tools.download": {"fspo.config.verifier"},
    "fspo.quickstart.step_report": {"fspo.config.verifier", "fspo.verifiers"},
    # The verifier imports verl, the trainer TRL (the `fdpo` extra): each only when its command runs.
    # ... and the llm rewrite's HTTP client only with `--variants llm`.
    "fspo.cli.fdpo": {
        "fspo.config.verifier",
        "fspo.verifiers",
        "fspo.methods.fdpo.trainer",
        "fspo.utils.chat_client",
    },
    # `fspo --help` and a mistyped command need no output-folder locks.
    "fspo.utils.subcommands": {"fspo.utils.output_dir"},
    # `fspo train --help` answers without verl; --options reads the config dataclasses (verl's BaseConfig).
    "fspo.cli.train": {"fspo.config.reference", "fspo.training.main"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported_modules(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The fspo modules an import statement of ``module`` loads (its own target, not parent packages)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, *([node.module] if node.module else [])])
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.split(".")[0] == "fspo" and name != module:
            found.add(name)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Every module's imports, and the ones made inside a function."""
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    lazy: dict[str, set[str]] = {}

    def visit(module: str, node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                targets = imported_modules(module, child)
                edges[module] |= targets
                if in_function and targets:
                    lazy.setdefault(module, set()).update(targets)
            visit(module, child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    for module, path in MODULES.items():
        visit(module, ast.parse(path.read_text(), str(path)), False)
    return edges, lazy


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle_among_fspo_modules():
    edges, _ = import_graph()
    assert cycles(edges) == []


def test_imports_inside_functions_are_the_listed_ones():
    _, lazy = import_graph()
    assert lazy == LAZY_IMPORTS


def test_the_config_package_imports_nothing_else_from_fspo():
    edges, _ = import_graph()
    outside = {
        m: {t for t in targets if not t.startswith("fspo.config")}
        for m, targets in edges.items()
        if m.startswith("fspo.config.") or m == "fspo.config"
    }
    assert {m: t for m, t in outside.items() if t} == {}


def test_the_trainer_and_the_tools_do_not_import_the_reward_manager():
    # reward.py is verl's reward manager alone: what the trainer and the CLIs share with it lives elsewhere.
    edges, _ = import_graph()
    assert [m for m, targets in edges.items() if "fspo.training.reward" in targets] == []


# The training job: what `python -m fspo.training.main` runs. The tools (fspo.cli, fspo.data, fspo.evaluation,
# fspo.verifier_tools, fspo.quickstart) sit above it and may import it, never the other way.
TRAINING_JOB = {"training", "launch", "verifiers", "methods", "config", "cpu", "utils"}
CORE_MODULES = {"steps", "token_labels", "advantage", "evidence"}
TOOLS = {"cli", "data", "evaluation", "verifier_tools", "quickstart"}


def folder(module: str) -> str:
    """The folder node of a module: fspo/<folder>/'s package, or a top-level module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fspo"


def folder_graph(edges: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """folder -> imported folder -> the module imports ("a -> b") that make that edge."""
    graph: dict[str, dict[str, set[str]]] = {folder(m): {} for m in edges}
    for module, targets in edges.items():
        for target in targets:
            if folder(target) != folder(module):
                graph[folder(module)].setdefault(folder(target), set()).add(f"{module} -> {target}")
    return graph


def test_no_import_cycle_among_fspo_folders():
    graph = folder_graph(import_graph()[0])
    found = cycles({node: set(targets) for node, targets in graph.items()})
    inside = [
        sorted(via for a in component for b, vias in graph[a].items() if b in component for via in vias)
        for component in found
    ]
    assert found == [], f"folders importing each other, through: {inside}"


def test_the_training_job_imports_no_tool_folder():
    graph = folder_graph(import_graph()[0])
    assert TRAINING_JOB | CORE_MODULES | TOOLS | {"fspo"} == set(graph)
    wrong = sorted(via for node in TRAINING_JOB | CORE_MODULES for tool in TOOLS for via in graph[node].get(tool, ()))
    assert wrong == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def readme_layout() -> str:
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1]


def test_the_readme_layout_names_every_module_and_package_of_fspo_and_nothing_else():
    block = readme_layout()
    lines = block.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("fspo/ "))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    fspo_part = "\n".join(lines[start:end])
    entries = {
        p.name + ("/" if p.is_dir() else "")
        for p in PACKAGE.iterdir()
        if p.name != "__init__.py"
        and not p.name.startswith((".", "_"))
        and p.name != "__pycache__"
        and (p.is_dir() or p.suffix == ".py")
    }
    named = {word.rstrip(",;:)").lstrip("(") for word in fspo_part.split()}
    missing = sorted(entry for entry in entries if entry not in named and entry.removesuffix(".py") not in named)
    assert missing == [], f"README layout does not name {missing}"
    listed = {
        line.split()[0]
        for line in lines[start + 1 : end]
        if line.startswith("  ") and not line.startswith("   ") and not line.lstrip().startswith("#")
    }
    assert sorted(listed - entries) == []
