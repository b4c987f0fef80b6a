"""Hydra's run folder under fspo's output rule (:mod:`fspo.utils.output_dir`): claimed before Hydra writes in it.

Hydra writes ``.hydra/`` (the composed config) and its log file into ``hydra.run.dir`` (by default a dated
``outputs/<date>/<time>``) with plain ``open``, following links, before the job starts. :class:`RunFolderRule`, a
Hydra callback, runs first (``on_run_start``): it resolves the folder once and pins it, claims it as fspo's
commands claim theirs (a link or a file fspo did not write at a planned path is refused, one line, exit 2) and
deletes the run's own earlier ``.hydra/`` so that nothing is written through a link planted inside it. A sweep
(``--multirun``) is refused: verl starts Ray once per process and never stops it, so a sweep's later jobs would run
in the first one's cluster.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from fspo.utils.output_dir import OutputConflict, check_output_paths, output_folder, remove_output

COMMAND = "fspo train"
FLAG = "hydra.run.dir"
# The override that registers the callback; fspo.training.main adds it to every run.
CALLBACK_OVERRIDE = f"+hydra.callbacks.fspo_run_folder._target_={__name__}.RunFolderRule"


def planned_paths(config: DictConfig, folder: Path) -> dict[Path, list[str]]:
    """What Hydra will write, by folder: ``output_subdir/`` in the run folder, and each logging handler's file."""
    planned: dict[Path, list[str]] = {}
    if config.hydra.output_subdir is not None:
        planned.setdefault(folder, []).append(f"{config.hydra.output_subdir}/")
    for logging in ("job_logging", "hydra_logging"):
        handlers = OmegaConf.select(config, f"hydra.{logging}.handlers", default=None) or {}
        for handler in handlers.values():
            filename = handler.get("filename") if isinstance(handler, DictConfig) else None
            if filename:
                path = Path(os.path.abspath(str(filename)))
                inside = path.is_relative_to(folder)
                where = folder if inside else path.parent
                planned.setdefault(where, []).append(str(path.relative_to(where)))
    return planned


def claim_run_folder(config: DictConfig) -> None:
    """Resolve ``hydra.run.dir`` once (its ``${now:...}``), pin it in ``config`` and claim it and the log files'
    folders (:func:`planned_paths`) under the output rule; a claimed run's earlier ``output_subdir/`` is deleted."""
    folder = Path(os.path.abspath(str(OmegaConf.select(config, FLAG))))
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.run.dir = str(folder)
        config.hydra.runtime.output_dir = str(folder)  # what the log handlers' file names are resolved against
    planned = planned_paths(config, folder)
    if not planned:  # nothing written: Hydra only makes the folder
        if not folder.is_dir():
            output_folder(FLAG, folder)
        return
    for where, paths in planned.items():
        claimed = check_output_paths(FLAG, where, paths, COMMAND)
        for path in paths:
            if path.endswith("/"):
                remove_output(claimed, path)


class RunFolderRule(Callback):
    """Hydra callback: :func:`claim_run_folder` before Hydra writes; a sweep refused. A refusal is one line on
    stderr and exit status 2."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            claim_run_folder(config)
        except OutputConflict as error:
            print(f"fspo: {' '.join(str(error).split())}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        print(
            "fspo: --multirun is not supported: verl starts Ray once per process, so each setting of a sweep needs "
            "its own fspo train",
            file=sys.stderr,
        )
        sys.exit(2)
