"""The import rules of docs/architecture.md, enforced: each layer imports only the layers
below it, and the known exceptions are listed by name so that the list can only shrink."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Each layer: the modules (dotted prefixes) it holds. The longest matching prefix wins.
LAYERS: dict[str, tuple[str, ...]] = {
    "runner": ("jobs",),
    "base": ("orchestrator.base",),
    "config": ("orchestrator.spec", "orchestrator.settings"),
    "decision": ("orchestrator.decision",),
    "records": ("orchestrator.records",),
    "store": ("orchestrator.store",),
    "offers": ("orchestrator.offers",),
    "backends": ("providers",),
    "service": ("orchestrator.service",),
    "client": ("orchestrator.client",),
    "server": ("orchestrator.server",),
    "simulate": ("orchestrator.simulate",),
    "cli": ("orchestrator.cli", "orchestrator.__main__"),
    "package": ("orchestrator",),
}

# What each layer may import, besides itself.
BELOW: dict[str, set[str]] = {
    "runner": set(),
    "base": set(),
    "config": {"base", "runner"},  # the runner's built-in job names
    "records": {"base"},
    "decision": {"base", "config", "records"},
    "store": {"base", "records"},
    "offers": {"base", "decision"},
    "backends": {"base", "config", "records", "decision", "offers", "runner"},
    "service": {"base", "config", "records", "decision", "store", "offers", "backends", "runner"},
    "client": {"base", "config", "records", "decision", "store", "service", "package"},
    "server": {"base", "config", "records", "decision", "store", "service", "package"},
    "simulate": {"base", "config", "decision", "offers"},
    # the runner's event format, which `orch submit` follows
    "cli": {"base", "config", "records", "decision", "client", "server", "simulate", "package",
            "runner"},
    "package": set(),
}

# Known exceptions (issue 16): importing module -> the layer it should not reach. Remove an
# entry when its import goes; the test fails on a stale entry as on a new exception.
DEBTS: set[tuple[str, str]] = {
    # Commands that bypass the client, so ORCH_SERVER does not reach them (each says so:
    # cli/render.local_only).
    ("orchestrator.cli.advise", "store"),
    ("orchestrator.cli.artifacts", "service"),
    ("orchestrator.cli.doctor", "service"),
    ("orchestrator.cli.doctor", "store"),
    ("orchestrator.cli.local", "service"),
    ("orchestrator.cli.plan", "service"),
    ("orchestrator.cli.schedule", "store"),
    ("orchestrator.cli.serve", "store"),
    ("orchestrator.cli.token", "store"),
    ("orchestrator.cli.cluster", "backends"),
    ("orchestrator.cli.plan", "backends"),
    ("orchestrator.cli.artifacts", "backends"),
    ("orchestrator.cli.advise", "offers"),
}


def layer_of(module: str) -> str:
    best, found = -1, None
    for name, prefixes in LAYERS.items():
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), name
    assert found is not None, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return found


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports() -> dict[str, set[str]]:
    """Each module of orchestrator/, providers/ and jobs/ -> the project modules it imports
    (at any depth: a function-level import counts as much as a top-level one)."""
    out: dict[str, set[str]] = {}
    for top in ("orchestrator", "providers", "jobs"):
        for path in sorted((REPO / top).rglob("*.py")):
            mod, seen = _module(path), set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    # `from orchestrator.spec import sky_schema` imports the module
                    # orchestrator.spec.sky_schema; `from orchestrator.spec import JobSpec`, the
                    # package orchestrator.spec
                    names = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                             else node.module for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level:
                    # relative (the runner's, which runs under another name on a target):
                    # `from . import events` in jobs/runner.py imports jobs.events
                    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                    names = ([f"{base}.{node.module}"] if node.module else
                             [f"{base}.{a.name}" for a in node.names])
                else:
                    continue
                seen.update(n for n in names if n.split(".")[0] in ("orchestrator", "providers", "jobs"))
            out[mod] = seen
    return out


def _crossings() -> set[tuple[str, str]]:
    found = set()
    for mod, targets in imports().items():
        here = layer_of(mod)
        for target in targets:
            there = layer_of(target)
            if there != here and there not in BELOW[here]:
                found.add((mod, there))
    return found


def test_every_layer_imports_only_what_is_below_it():
    new = sorted(_crossings() - DEBTS)
    assert not new, ("imports across the layers of docs/architecture.md: "
                     + "; ".join(f"{m} imports the {layer} layer" for m, layer in new))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _module_edges() -> dict[str, set[str]]:
    graph = imports()
    known = set(graph)

    def resolve(name: str) -> str:  # `import orchestrator.spec.load.X`: its module
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    return {m: {r for t in ts if (r := resolve(t)) and r != m} for m, ts in graph.items()}


def _folder(module: str) -> str:
    """The folder a module's file is in (a package's `__init__` is in its own)."""
    path = REPO.joinpath(*module.split("."))
    return module if (path / "__init__.py").is_file() else module.rpartition(".")[0]


def test_no_import_cycle_between_files_or_folders():
    """A file never imports (at any depth) a file that imports it back, nor a folder a folder
    that imports it back: what depends on what reads one way."""
    edges = _module_edges()
    assert not _cycles(edges), f"import cycles between files: {_cycles(edges)}"
    folders: dict[str, set[str]] = {}
    for m, ts in edges.items():
        # a folder's subfolder is part of it (service/upload is the service's)
        folders.setdefault(_folder(m), set()).update(
            f for t in ts if (f := _folder(t)) != _folder(m) and not _folder(t).startswith(_folder(m) + ".")
            and not _folder(m).startswith(_folder(t) + "."))
    assert not _cycles(folders), f"import cycles between folders: {_cycles(folders)}"


def test_the_list_of_known_exceptions_is_current():
    stale = sorted(DEBTS - _crossings())
    assert not stale, f"no longer true, remove from DEBTS: {stale}"


def test_the_decision_core_and_the_runner_import_no_sdk_at_module_level():
    """decision/ and the job file are pure (no ray, sky, boto3, torch, fastapi); the runner
    imports torch and ray only inside the functions that run on the target (its built-in
    training loops, jobs/builtin/, are user code and import what they use)."""
    sdks = {"ray", "sky", "boto3", "botocore", "torch", "fastapi", "uvicorn", "psycopg"}
    bad = []
    for top, allowed in (("orchestrator/decision", set()), ("orchestrator/spec", set()),
                         ("jobs", set())):
        root = REPO / top
        paths = sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
        for path in paths:
            if "builtin" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            for node in tree.body:  # module level only
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                bad += [f"{path.relative_to(REPO)}: {n}" for n in names
                        if n.split(".")[0] in sdks - allowed]
    assert not bad, bad


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for top in ("orchestrator", "providers", "jobs")
            for p in (REPO / top).rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these (one job per module, a few hundred lines): {long}"


# The one door into the service (issue 50): cli/, client/ and server/ call `Orch`
# (service/orch.py) and read typed records; they never reach past it into its core or its
# store, nor call a service module's functions with either.
OUTSIDE = ("orchestrator.cli", "orchestrator.client", "orchestrator.server", "orchestrator.__main__")
DOOR = "orchestrator.service.orch"
# Service modules still imported from outside, by what they give (a function or a type
# that is not a service call on the store): remove an entry when its import goes.
DOOR_DEBTS: set[tuple[str, str]] = {
    ("orchestrator.client.remote", "orchestrator.service.launch_spec"),  # left_out: paths
    ("orchestrator.client.remote", "orchestrator.service.upload"),  # the upload's format
    ("orchestrator.server.app", "orchestrator.service.upload"),
    ("orchestrator.server.guard", "orchestrator.service.upload"),
    ("orchestrator.server.intake", "orchestrator.service.upload"),
    ("orchestrator.server.intake", "orchestrator.service.respec"),
    ("orchestrator.server.git_gate", "orchestrator.service.git_workdir"),
    ("orchestrator.server.metrics", "orchestrator.service.metrics_snapshot"),  # its types
    ("orchestrator.server.routes.metrics", "orchestrator.service.metrics_snapshot"),
    ("orchestrator.server.routes.uploads", "orchestrator.service.upload"),
    ("orchestrator.server.replicas", "orchestrator.service.processes"),
    ("orchestrator.server.scheduler", "orchestrator.service.respec"),
    ("orchestrator.server.scheduler", "orchestrator.service.upload"),
}


def _outside_modules():
    for top in ("cli", "client", "server"):
        for path in sorted((REPO / "orchestrator" / top).rglob("*.py")):
            yield _module(path), path


def _service_module(name: str) -> str:
    """orchestrator.service.upload.sharing -> orchestrator.service.upload (a package counts
    as one module: its parts are its own business)."""
    return ".".join(name.split(".")[:3])


def test_one_door_into_the_service():
    reach = [f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}"
             for mod, path in _outside_modules()
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Attribute) and node.attr in ("core", "store")]
    assert not reach, ("reach-throughs past the `Orch` facade into its core or store (call a "
                       "method of Orch instead): " + "; ".join(reach))
    graph = imports()
    doors = {(mod, _service_module(t)) for mod, _ in _outside_modules() for t in graph[mod]
             if layer_of(t) == "service" and _service_module(t) not in (DOOR, "orchestrator.service")}
    new, stale = sorted(doors - DOOR_DEBTS), sorted(DOOR_DEBTS - doors)
    assert not new, ("service modules imported past the `Orch` facade (add a method to Orch): "
                     + "; ".join(f"{m} imports {t}" for m, t in new))
    assert not stale, f"no longer true, remove from DOOR_DEBTS: {stale}"
