"""An outcome reward that varies within every group, for the tiny models of the end-to-end tests and the
recipes' CPU twins (loaded by verl through ``reward.custom_reward_function.path``).

A tiny random model never answers right, so a dataset's scorer gives every rollout 0, every GRPO advantage is
0 and a step changes no weight. The share of ASCII letters in a response differs between any two random
responses, so advantages are non-zero and every step trains, independently of the step labels (advantages of
both signs meet labels of both signs, so FSPO's flip has work to do). The share of distinct words does not: a
random model's 40 tokens are as many distinct "words", 1.0 for every rollout (a seeded CI run met such a step).

The KnowRL and FAPO modes reward binary correctness (the scorer's ``acc``), not the score: ``acc`` is the parity
of the letter count, right for about half of any model's responses, so most groups mix right and wrong answers.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    letters = sum(character.isascii() and character.isalpha() for character in solution_str)
    return {"score": letters / len(solution_str) if solution_str else 0.0, "acc": float(letters % 2)}
