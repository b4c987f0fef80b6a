"""``fspo.dump_dir``: the tensors each actor update trains on, saved for inspection (off by default).

One file per actor update, ``step_<N>.pt`` (``step_<N>_<k>.pt`` when a step makes several updates):
advantages before and after the flip, the labels, the response mask and which rows verl added as padding.
"""

from __future__ import annotations

from typing import Any

import torch

from fspo.utils.atomic_file import replacing


def dump_file_name(global_step: int, parameter_sync_step: int, local_step: int) -> str:
    """``step_<N>.pt``, or ``step_<N>_<k>.pt`` for the k-th of ``parameter_sync_step`` actor updates of step N."""
    return f"step_{global_step}.pt" if parameter_sync_step == 1 else f"step_{global_step}_{local_step}.pt"


def save_atomically(record: Any, path: str) -> None:
    """``torch.save`` to ``path`` through a temporary file beside it, so a run killed mid-write leaves the
    previous dump or none, never a truncated ``step_<N>.pt`` that a reader would take for a whole one."""
    with replacing(path) as temporary:
        torch.save(record, temporary)
