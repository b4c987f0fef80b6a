"""verl's ``RLHFDataset`` with its overlong-prompt filter named by a digest of what the filter reads.

Loaded by verl through config alone (``fspo/config/fspo_trainer.yaml``)::

    data.custom_cls.path=pkg://fspo.training.dataset
    data.custom_cls.name=FingerprintedRLHFDataset

verl drops prompts longer than ``data.max_prompt_length`` with ``Dataset.filter(lambda doc: ...)``, and the lambda
holds the dataset object, tokenizer included. ``datasets`` pickles it with dill twice: to name the filtered table (its
fingerprint, and the cache file it is saved under), and to send it to a pool of ``num_proc`` processes, which
``datasets`` 5 starts for ``num_proc=1`` too (verl's ``filter_overlong_prompts_workers`` default). For Qwen2.5's
151k-token vocabulary that is ~10 s per dataset on a 2-core machine, twice per run (train and validation), on the
trainer's critical path before any worker starts. Here the filter is handed its fingerprint: a hash of the table's own
fingerprint and of everything the length it computes depends on (the tokenizer's serialised pipeline and vocabulary,
its chat template and special tokens, the template kwargs and tool schemas, the limit, verl's version), 0.2 s; and a
pool of one process becomes this process. The rows kept are verl's, by verl's code; a change to any of those inputs
names a new table, so a cached filter result is reused only where verl's own would be. A multimodal processor, or a
tokenizer without a serialisable fast backend, keeps ``datasets``' own hashing.
"""

from __future__ import annotations

import hashlib
import json

import verl
from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset


class FingerprintedRLHFDataset(RLHFDataset):
    """``RLHFDataset`` whose overlong-prompt filter is fingerprinted by :func:`filter_fingerprint`."""

    def maybe_filter_out_long_prompts(self, dataframe=None):
        fingerprint = filter_fingerprint(self, dataframe) if self.filter_overlong_prompts else None
        if fingerprint is None:
            return super().maybe_filter_out_long_prompts(dataframe)
        return super().maybe_filter_out_long_prompts(_NamedFilter(dataframe, fingerprint))


class _NamedFilter:
    """The table, as verl's filter call sees it: ``filter`` gets ``new_fingerprint`` (``datasets`` skips its hashing),
    and ``num_proc=1`` runs in this process (a pool of one does the same work after pickling the tokenizer into it)."""

    def __init__(self, table, fingerprint: str):
        self._table = table
        self._fingerprint = fingerprint

    def filter(self, function, num_proc=None, **kwargs):
        num_proc = None if num_proc == 1 else num_proc
        return self._table.filter(function, num_proc=num_proc, new_fingerprint=self._fingerprint, **kwargs)


def filter_fingerprint(dataset: RLHFDataset, table) -> str | None:
    """A name for ``table`` filtered by ``dataset``'s length limit; None where it cannot be derived cheaply."""
    tokenizer = dataset.tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if dataset.processor is not None or backend is None or not hasattr(table, "_fingerprint"):
        return None
    reads = {
        "verl": verl.__version__,
        "table": table._fingerprint,
        "max_prompt_length": dataset.max_prompt_length,
        "prompt_key": dataset.prompt_key,
        "apply_chat_template_kwargs": _plain(dataset.apply_chat_template_kwargs),
        "tool_schemas": dataset.tool_schemas,
        "tokenizer_class": f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}",
        "chat_template": tokenizer.chat_template,
        "special_tokens": tokenizer.special_tokens_map,
        "backend": hashlib.sha256(backend.to_str().encode()).hexdigest(),
    }
    text = json.dumps(reads, sort_keys=True, default=repr)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()  # datasets takes at most 64 characters


def _plain(value):
    """A config value as plain containers, interpolations resolved (its repr would hide what they resolve to)."""
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value
