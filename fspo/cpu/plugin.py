"""verl plugin entry point (``verl.plugins`` -> ``fspo_cpu``): the CPU backend.

verl imports this module in every process that imports verl and swallows any exception at
debug level, so a broken plugin would fail silently and leave verl falling back to CUDA. This
module therefore reports its own failures on stderr before re-raising, and records the outcome
in :data:`STATE` so that ``fspo.training.main`` can check the backend really loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import traceback
from collections.abc import Callable
from types import ModuleType

from fspo.cpu import cpu_mode_requested

STATE: dict[str, object] = {"loaded": False, "active": False, "error": None}

# The CPU preset's agent loop (rollout.agent.default_agent_loop), in verl's agent-loop registry.
AGENT_LOOP_NAME = "fspo_seeded_single_turn"
AGENT_LOOP_TARGET = "fspo.cpu.agent_loop.SeededSingleTurnAgentLoop"
AGENT_LOOP_REGISTRY = "verl.experimental.agent_loop.agent_loop"


def _activate() -> None:
    # Lazy: verl imports this plugin while verl itself is being imported, and these modules import verl.
    from verl.plugin.platform import PlatformRegistry

    from fspo.cpu import CPU_PLATFORM, patches
    from fspo.cpu.platform import PlatformCPU
    from fspo.cpu.rollout import register as register_rollout

    PlatformRegistry.register(platform=CPU_PLATFORM)(PlatformCPU)
    patches.apply()
    register_rollout()
    register_agent_loop()
    patch_engine_on_import()


def register_agent_loop() -> None:
    """Add :data:`AGENT_LOOP_NAME` to verl's agent-loop registry once that module is imported (idempotent).

    Not before: this plugin runs in every process that imports verl, and importing the registry's module costs
    ~1.9 s of CPU, which the driver, the FSDP workers and the reward and verifier actors would pay for nothing.
    The registry holds a Hydra target, so the class itself is imported only where an agent loop is built."""
    after_import(AGENT_LOOP_REGISTRY, _add_agent_loop)


def patch_engine_on_import() -> None:
    """Patch the FSDP engine (:func:`fspo.cpu.patches.patch_engine`: the LM head at read positions only, zero-gradient
    updates) where it is imported: the FSDP workers, not every process that imports verl."""
    from fspo.cpu import patches

    after_import(patches.ENGINE_MODULE, patches.patch_engine)


def after_import(name: str, run: Callable[[ModuleType], None]) -> None:
    """Call ``run(module)`` on module ``name`` now if it is imported, else right after its import (once)."""
    module = sys.modules.get(name)
    if module is not None:
        run(module)
    elif not any(
        isinstance(finder, _RunAfterImport) and (finder.name, finder.run) == (name, run) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _RunAfterImport(name, run))


def _add_agent_loop(registry: ModuleType) -> None:
    registry._agent_loop_registry[AGENT_LOOP_NAME] = {"_target_": AGENT_LOOP_TARGET}


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Finds one module through the other finders and runs a function on it once the module has run."""

    def __init__(self, name: str, run: Callable[[ModuleType], None]):
        self.name = name
        self.run = run

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # one module, once: the other finders locate it
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            self.run(module)

        spec.loader.exec_module = exec_module
        return spec


def load() -> None:
    if cpu_mode_requested():
        _activate()
        STATE["active"] = True
    STATE["loaded"] = True


try:
    load()
except Exception as error:  # noqa: BLE001 - reported loudly, then re-raised for verl to see
    STATE["error"] = f"{type(error).__name__}: {error}"
    print(
        "fspo: the CPU backend plugin (fspo.cpu.plugin) failed to load; verl will not run on this "
        f"CPU machine.\n{traceback.format_exc()}",
        file=sys.stderr,
        flush=True,
    )
    raise
