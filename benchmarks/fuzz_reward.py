"""Fuzz the reward path: the real FSPO reward manager on seeded random rollouts.

Each rollout is random text built from the pieces a policy really emits (think/answer tags, closed or not,
nested, LaTeX, huge numbers, power towers, CJK, emoji, long runs), or random token ids, or a response cut
at a random token (mid-character included); with random data sources, ground truths of every shape and
``extra_info`` of every shape (evidence as a string, list, array, NaN, None; the row itself a string or
NaN). Every rollout goes through ``FSPORewardManager.run_single`` as verl's reward loop calls it, many at a
time. Counted, and printed per 10,000 rollouts:

- crashes: ``run_single`` raised;
- bad labels: the decoded labels do not cover the response exactly;
- non-finite rewards: NaN or infinite ``reward_score``;
- key mismatches: a rollout's ``reward_extra_info`` keys differ from the others' (verl cannot stack them);
- scorer timeouts: the outcome scorer passed ``fspo.scorer_timeout_s`` (scored 0, counted).

    python benchmarks/fuzz_reward.py --rollouts 20000 --seed 0
"""

from __future__ import annotations

import argparse
import time

from fspo_testing.fuzz import KINDS, fuzz_cases, fuzz_reward_manager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scorer-timeout-s", type=float, default=10.0)
    parser.add_argument("--towers", action="store_true", help="include power towers up to 9^{9^{9^{9}}}")
    args = parser.parse_args()

    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from fspo.training.reward import FSPORewardManager
    from fspo_testing.tiny_model import qwen_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    block = {"enable": True, "verifier": {"name": "lexical"}, "scorer_timeout_s": args.scorer_timeout_s}
    reward_manager = FSPORewardManager(OmegaConf.create({"fspo": block}), tokenizer, compute_score=None)
    cases = fuzz_cases(args.seed, args.rollouts, len(tokenizer), towers=args.towers)
    started = time.perf_counter()
    counts, examples = fuzz_reward_manager(reward_manager, tokenizer, cases, seed=args.seed)
    seconds = time.perf_counter() - started
    total = counts["rollouts"]
    print(
        f"rollouts={total} seed={args.seed} towers={args.towers} seconds={seconds:.1f} "
        f"({1000 * seconds / max(total, 1):.2f} ms/rollout)"
    )
    for kind in KINDS:
        print(f"{kind:>20}: {counts[kind]:6d}  ({10000 * counts[kind] / max(total, 1):.2f} per 10,000)")
    for example in examples:
        print("  e.g.", example)


if __name__ == "__main__":
    main()
