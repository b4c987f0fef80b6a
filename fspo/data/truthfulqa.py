"""TruthfulQA (truthfulqa/truthful_qa), as open generation or as MC1/MC2 multiple choice.

- ``--form generation``: ground truth = the best answer then the other correct answers (aliases);
  ``extra_info["incorrect_answers"]`` = the incorrect answers. Scored by `fspo.training.outcome`: the answer is
  right when it is closer (token F1) to some correct answer than to every incorrect one.
- ``--form mc1`` / ``mc2``: the options are shuffled per question (seeded; the source lists the correct
  one first) and lettered; ground truth = the correct letter (MC1) or the list of true letters (MC2).

Both the hub layout and the original files (TruthfulQA.csv, mc_task.json) are read.

    fspo data truthfulqa --form mc1
"""

from __future__ import annotations

import numbers

from fspo.data.builder import Example
from fspo.data.choices import multiple_choice_body, option_letters
from fspo.data.io import SourceFieldError, dedupe, field_text, get_field, get_text

FORMS = ("generation", "mc1", "mc2")


def answer_list(value, where: str, name: str) -> list[str]:
    """Answers from a list, or from the original CSV's "a; b; c" string."""
    if value is None or isinstance(value, (str, bytes, numbers.Number)):
        return [part.strip() for part in field_text(value, where, name).split(";") if part.strip()]
    return [text for text in (field_text(item, where, name) for item in value) if text]


def convert_generation(record: dict, where: str, args, rng) -> Example | None:
    question = get_text(record, ("question", "Question"), where)
    best = get_text(record, ("best_answer", "Best Answer"), where)
    correct = answer_list(get_field(record, ("correct_answers", "Correct Answers"), where), where, "correct_answers")
    incorrect = answer_list(
        get_field(record, ("incorrect_answers", "Incorrect Answers"), where), where, "incorrect_answers"
    )
    truths = dedupe(([best] if best else []) + correct)
    if not question or not truths:
        return None
    return Example(question=question, ground_truth=truths, incorrect_answers=incorrect)


def targets(record: dict, name: str, where: str) -> list[tuple[str, int]]:
    """(choice, label) pairs of an ``mcN_targets`` field in the hub or the original layout."""
    value = get_field(record, name, where)
    if isinstance(value, dict) and "choices" in value:
        choices, labels = list(value["choices"]), list(get_field(value, "labels", f"{where}, field {name!r}"))
        if len(choices) != len(labels):
            raise SourceFieldError(f"{where}: field {name!r} has {len(choices)} choices but {len(labels)} labels")
        return [(field_text(choice, where, name), int(label)) for choice, label in zip(choices, labels)]
    if isinstance(value, dict):  # original mc_task.json: {choice: label}
        return [(field_text(choice, where, name), int(label)) for choice, label in value.items()]
    raise SourceFieldError(f"{where}: field {name!r} must be {{'choices', 'labels'}} or {{choice: label}}")


def convert_multiple_choice(record: dict, where: str, args, rng) -> Example | None:
    question = get_text(record, ("question", "Question"), where)
    pairs = [(choice, label) for choice, label in targets(record, f"{args.form}_targets", where) if choice]
    if not question or not any(label for _, label in pairs):
        return None
    rng.shuffle(pairs)
    letters = option_letters(len(pairs))
    true_letters = [letter for letter, (_, label) in zip(letters, pairs) if label]
    ground_truth = true_letters[0] if args.form == "mc1" else true_letters
    body = multiple_choice_body(question, [choice for choice, _ in pairs])
    return Example(question=question, ground_truth=ground_truth, prompt_body=body)


def convert(record: dict, where: str, args, rng) -> Example | None:
    if args.form == "generation":
        return convert_generation(record, where, args, rng)
    return convert_multiple_choice(record, where, args, rng)


def add_arguments(parser) -> None:
    parser.add_argument("--form", choices=FORMS, default="generation", help="generation, mc1 or mc2")
