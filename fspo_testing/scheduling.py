"""How the suite shares two cores: which tests must run in one pytest-xdist worker, and the order work goes out.

`bash scripts/test.sh` runs pytest with two xdist workers (``--dist loadgroup``). A fixture of module or session
scope is built once per *worker*, so tests that share an expensive one (a trainer run) must land on the same
worker: :func:`shared_fixture_groups` joins every test to every other test it shares such a fixture with
(union-find), and the conftest marks each joined set as one ``xdist_group``. Fixtures listed as cheap to repeat
(built from the on-disk cache of :mod:`fspo_testing.build_cache`) do not join tests.

Two workers finish together only if the longest work starts first: :func:`ordered_by_cost` puts the work units
(a group, or a test on its own) in descending order of their recorded seconds (``tests/durations.json``, written
by a full run with ``FSPO_RECORD_DURATIONS``); xdist hands them out in that order (``--no-loadscope-reorder``).

Each worker computes on its share of the cores (:func:`share_the_cores`): torch's default, every core in every
process, oversubscribes them when two workers run at once, and OpenMP threads that wait for a busy core burn it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# A test this file has no figure for: an end-to-end test starts a trainer run and a network test waits on the
# package index (minutes each); any other takes about a second.
UNKNOWN_E2E_S = 120.0
LONG_MARKERS = ("e2e", "network")
UNKNOWN_S = 1.0


def _shared_fixture_keys(item, cheap: frozenset[str]) -> list[tuple[str, str]]:
    """The module- and session-scoped fixtures of the project's own that ``item`` uses, as (scope key, name)."""
    keys = []
    for name in item.fixturenames:
        definitions = item._fixtureinfo.name2fixturedefs.get(name) or ()
        if not definitions or name in cheap:
            continue
        definition = definitions[-1]  # the one that applies to this item (the closest override)
        if definition.scope not in ("module", "package", "session") or not getattr(definition, "baseid", ""):
            continue  # function/class scope is rebuilt per test anyway; an empty baseid is pytest's or a plugin's
        where = "session" if definition.scope == "session" else item.module.__name__
        keys.append((where, name))
    return keys


def shared_fixture_groups(items: Iterable, cheap: Iterable[str] = ()) -> dict[str, str]:
    """Maps the nodeid of each test that shares an expensive fixture with another test to its group's name.

    Tests are joined when they use the same module- or session-scoped fixture (the same module's, for module
    scope), transitively; a test sharing nothing with any other is left out (xdist may run it anywhere). The
    group is named after its first test's module and the fixtures that joined it.
    """
    cheap = frozenset(cheap)
    parent: dict = {}

    def find(node):
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    items = list(items)
    fixtures_of = {}
    for item in items:
        keys = _shared_fixture_keys(item, cheap)
        fixtures_of[item.nodeid] = keys
        for key in keys:
            parent[find(("test", item.nodeid))] = find(("fixture", key))
    members: dict = {}
    for item in items:
        if fixtures_of[item.nodeid]:
            members.setdefault(find(("test", item.nodeid)), []).append(item)
    groups = {}
    for tests in members.values():
        names = sorted({name for test in tests for _, name in fixtures_of[test.nodeid]})
        label = f"{tests[0].module.__name__.rpartition('.')[2]}:{'+'.join(names)}"
        for test in tests:
            groups[test.nodeid] = label
    return groups


def read_durations(path: Path) -> dict[str, float]:
    """The recorded seconds per test nodeid (without xdist's ``@group`` suffix); {} when the file is absent."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


def ordered_by_cost(items: list, groups: Mapping[str, str], seconds: Mapping[str, float]) -> list:
    """``items`` with the work units (a group, or a lone test) in descending order of their summed seconds.

    A test without a recorded figure counts :data:`UNKNOWN_E2E_S` if marked ``e2e`` or ``network``, else
    :data:`UNKNOWN_S`.
    Within a unit the tests keep their collection order; equal units keep theirs (the sort is stable).
    """

    def cost(item) -> float:
        if item.nodeid in seconds:
            return seconds[item.nodeid]
        return UNKNOWN_E2E_S if any(item.get_closest_marker(name) for name in LONG_MARKERS) else UNKNOWN_S

    units: dict[str, list] = {}
    for item in items:
        units.setdefault(groups.get(item.nodeid, item.nodeid), []).append(item)
    ranked = sorted(units.values(), key=lambda unit: -sum(cost(item) for item in unit))
    return [item for unit in ranked for item in unit]


# Variables that set how many threads a process computes with: OpenMP's and MKL's (torch's intra-op pool, read when
# torch loads) and the CPU backend's (fspo/cpu/compute.py; a trainer run's Ray workers read it).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "FSPO_CPU_THREADS")


def threads_per_worker(workers: int, cores: int) -> int:
    """Threads each of ``workers`` processes sharing ``cores`` cores computes with (at least one)."""
    return max(1, cores // max(1, workers))


def share_the_cores(env=os.environ) -> int | None:
    """In a pytest-xdist worker, let this process and everything it starts (subprocesses, trainer runs and their Ray
    workers) compute on :func:`threads_per_worker` threads; a variable already set is kept. Returns the count, or
    None outside xdist.

    Measured here (2 cores, 2 workers): two twins at once took 273 CPU-s and 159 s at torch's default (2 threads),
    216 CPU-s and 130 s at 1; five CPU-heavy test files (verifier authors, flip effect, evaluation, SmolLM2,
    command guard) 686 CPU-s and 364 s, against 505 CPU-s and 258 s.
    """
    workers = env.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    threads = threads_per_worker(int(workers), len(os.sched_getaffinity(0)))
    for name in THREAD_VARIABLES:
        env.setdefault(name, str(threads))
    if "torch" in sys.modules:  # already loaded (by a plugin): its pool read the variables before this
        sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
    return threads
