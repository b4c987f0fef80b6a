"""verl plugin entry point (``verl.plugins`` -> ``fspo_cpu``): the CPU backend.

verl imports this module in every process that imports verl and swallows any exception at
debug level, so a broken plugin would fail silently and leave verl falling back to CUDA. This
module therefore reports its own failures on stderr before re-raising, and records the outcome
in :data:`STATE` so that ``fspo.main`` can check the backend really loaded.
"""

from __future__ import annotations

import sys
import traceback

from fspo.cpu import cpu_mode_requested

STATE: dict[str, object] = {"loaded": False, "active": False, "error": None}


def _activate() -> None:
    # Lazy: verl imports this plugin while verl itself is being imported, and these modules import verl.
    from verl.plugin.platform import PlatformRegistry

    from fspo.cpu import CPU_PLATFORM, patches
    from fspo.cpu.agent_loop import register as register_agent_loop
    from fspo.cpu.platform import PlatformCPU
    from fspo.cpu.rollout import register as register_rollout

    PlatformRegistry.register(platform=CPU_PLATFORM)(PlatformCPU)
    patches.apply()
    register_rollout()
    register_agent_loop()


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
