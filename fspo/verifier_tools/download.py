"""``fspo verifier download NAME``: put everything a verifier backend loads into the Hugging Face cache.

For nodes that cannot reach the hub (or should not, with a gated model and many workers): run it once
where the hub is reachable, with a token of an account that accepted the model's terms, into the cache
the nodes read (a shared ``HF_HOME``, or ``--cache-dir`` copied there), then train with ``HF_HUB_OFFLINE=1``:

    HF_TOKEN=hf_... fspo verifier download hhem                 # HHEM-2.1-Open + google/flan-t5-base's config and tokenizer
    fspo verifier download nli --model-path MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli --cache-dir /shared/hf/hub

What is fetched is what the backend loads and nothing else (:func:`fspo.launch.preflight.verifier_needs`): for
``hhem`` its config, weights and remote code, then the foundation its config names (config and tokenizer
files, not flan-t5's weights). The training run's preflight checks the same list.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fspo.config.vocabulary import MODEL_BACKENDS, VERIFIER_NAMES, ConfigError
from fspo.launch.hub_deadline import bound_hub_requests
from fspo.launch.preflight import (
    HubProbe,
    ModelNeed,
    cached_snapshot,
    hub_cache_dir,
    hub_offline,
    looks_like_hub_id,
    missing_files,
    resolve,
    verifier_needs,
)
from fspo.utils.arguments import HelpFormatter

# What to fetch of a repo: everything a loader may read, no other weight formats (flax, tf, onnx).
TOKENIZER_PATTERNS = ["*.json", "*.model", "*.txt", "*.tiktoken"]
MODEL_PATTERNS = [*TOKENIZER_PATTERNS, "*.safetensors", "*.py"]


def allow_patterns(need: ModelNeed) -> list[str]:
    weights = any("model.safetensors" in group for group in need.files)
    return MODEL_PATTERNS if weights else TOKENIZER_PATTERNS


def fetch(need: ModelNeed, cache_dir: str | None = None, probe: HubProbe | None = None) -> tuple[Path, str]:
    """``need`` in the HF cache (or its local folder): ``(folder, how)``, ``how`` one of ``fetched``, ``up to
    date`` (it was cached, the hub has nothing newer), ``cached`` (the hub could not be asked) and ``local
    folder``. Raises ConfigError naming the fix (path, token, the model's terms, the network)."""
    from huggingface_hub import snapshot_download

    probe = probe or HubProbe()
    if not looks_like_hub_id(need.ref) or Path(need.ref).expanduser().exists():
        return Path(resolve(need, probe, cache_dir)), "local folder"
    before = cached_snapshot(need.ref, cache_dir)
    was_complete = before is not None and not missing_files(before, need)
    bound_hub_requests()  # snapshot_download's repo_info and tree listing have no timeout of their own
    try:
        folder = Path(
            snapshot_download(
                need.ref,
                allow_patterns=allow_patterns(need),
                cache_dir=cache_dir,
                endpoint=probe.endpoint,
                etag_timeout=probe.timeout_s,
            )
        )
    except Exception as error:  # noqa: BLE001 - the preflight names the fix; else the hub's own error
        where = Path(resolve(need, probe, cache_dir))  # raises for gated, not found, offline, unreachable
        if not where.is_dir():
            raise ConfigError(f"{need.key}: downloading {need.ref} failed: {error}") from error
        return where, "cached"
    if missing := missing_files(folder, need):
        resolve(need, probe, cache_dir)  # an offline or unreachable hub left a partial snapshot: say so
        raise ConfigError(
            f"{need.key}: {need.ref} on the hub lacks {', '.join(missing)}: it is not what the backend loads"
        )
    if not was_complete:
        return folder, "fetched"
    if hub_offline():
        return folder, "cached; HF_HUB_OFFLINE is set, the hub was not asked"
    # snapshot_download serves a complete cache when the hub cannot be reached: ask once to tell which
    return folder, "cached; the hub could not be reached" if probe.problem(need.ref) else "up to date"


def download_verifier(
    name: str,
    model_path: str | None = None,
    tokenizer_path: str | None = None,
    trust_remote_code: bool | None = None,
    cache_dir: str | None = None,
    endpoint: str | None = None,
) -> list[str]:
    """Fetch what backend ``name`` loads into the cache; one line per model: what it is and where it is.
    ``endpoint``: the hub (default ``HF_ENDPOINT``, else huggingface.co); the token is huggingface_hub's
    (``HF_TOKEN``, else ``hf auth login``'s)."""
    from fspo.config.verifier import VerifierConfig  # lazy: imports verl (seconds); --help and refusals need not

    verifier = VerifierConfig(
        name=name, model_path=model_path, tokenizer_path=tokenizer_path, trust_remote_code=trust_remote_code
    )
    probe = HubProbe(endpoint)
    done: dict[str, str] = {}
    # HHEM's foundation is named in its config.json: list the needs again once a download may have added it.
    while pending := [need for need in verifier_needs(verifier, cache_dir) if need.ref not in done]:
        for need in pending:
            folder, how = fetch(need, cache_dir, probe)
            files = sorted(p.name for p in folder.iterdir() if p.is_file())
            done[need.ref] = f"{need.ref} ({how}): {folder} [{', '.join(files)}]"
    return list(done.values())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fspo verifier download",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "name",
        help=f"the backend: {', '.join(MODEL_BACKENDS)} (the others, "
        f"{', '.join(name for name in VERIFIER_NAMES if name not in MODEL_BACKENDS)}, load no weights)",
    )
    parser.add_argument(
        "--model-path", default=None, help="hub id or folder (default: the backend's, e.g. HHEM-2.1-Open)"
    )
    parser.add_argument(
        "--tokenizer-path", default=None, help="hub id or folder of the tokenizer (default: the model's)"
    )
    parser.add_argument(
        "--no-remote-code",
        action="store_true",
        help="the run sets fspo.verifier.trust_remote_code=false (the checkpoint's code is not needed)",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="the hub cache to fill (default: HF_HUB_CACHE, else HF_HOME/hub); the nodes set HF_HUB_CACHE to it",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        lines = download_verifier(
            args.name, args.model_path, args.tokenizer_path, False if args.no_remote_code else None, args.cache_dir
        )
    except ConfigError as error:
        print(f"fspo verifier download: {error}", file=sys.stderr)
        return 2
    if not lines:
        print(f"fspo verifier download: {args.name} loads no weights; nothing to fetch")
        return 0
    print("\n".join(lines))
    cache = hub_cache_dir(args.cache_dir)
    if not all("(local folder)" in line for line in lines):
        print(
            f"cache: {cache}; on offline nodes set HF_HUB_CACHE={cache} (or the HF_HOME above it) and HF_HUB_OFFLINE=1"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
