"""Label alignment: fspo's exact token labels vs the released code's re-tokenise-and-count procedure.

Generates long multi-hop style responses (names, titles, years, decimals, lists, paragraphs; about 575
reasoning tokens each), gives each reasoning sentence a random verdict, and labels the response tokens three
ways with the real Qwen2 tokenizer:

- ground truth: each token's characters from decoding every prefix of the ids (quadratic, exact);
- fspo: `fspo.token_labels.token_labels`;
- released procedure: each sentence is tokenised on its own (`tokenizer.encode(sentence)`, no special
  tokens) and its verdict is laid over that many tokens in a row from response position 0; the whitespace
  between sentences is not counted and a sentence tokenised alone can differ from in context, so the labels
  drift.

Accuracy is over the reasoning tokens (those before `</think>`). Prints one figure per line.

    python benchmarks/label_alignment.py [--responses 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from transformers import AutoTokenizer

from fspo import token_labels as labels_module
from fspo.steps import reasoning_span, reasoning_steps
from fspo.token_labels import token_labels

PEOPLE = [
    "Steven Spielberg",
    "Dr. Anna Müller",
    "J. R. R. Tolkien",
    "Zhang Yimou",
    "Ingrid Bergman",
    "Mr. O'Neill",
    "Gabriel García Márquez",
    "Akira Kurosawa",
    "St. John Philby",
    "Björk Guðmundsdóttir",
]
WORKS = [
    '"Jaws"',
    "The Seventh Seal",
    '"Raise the Red Lantern"',
    "Rashomon",
    "One Hundred Years of Solitude",
    "the U.S. edition of The Hobbit",
    "Dancer in the Dark",
    "Casablanca (1942)",
]
PLACES = [
    "Cincinnati, Ohio",
    "Xi'an",
    "Stockholm",
    "Aracataca",
    "Reykjavík",
    "the U.K.",
    "Tokyo",
    "São Paulo",
]
SENTENCES = [
    "{person} was born on {month} {day}, {year} in {place}.",
    "According to the evidence, {person} directed {work} in {year}.",
    "{work} was released in {year}, i.e. about {gap} years before {work2}.",
    "So the director of {work} is {person}, not {person2}.",
    "Wait, I need to double-check: {person2} was born in {year2}, which is {gap} years later.",
    "The film earned ${money} million, roughly {ratio}% of its {year} budget.",
    "Hmm... {person}'s nationality is listed as {nationality}.",
    "Let me compare the two birth dates: {year} vs. {year2}.",
    "{person} (born {year}) and {person2} (born {year2}) were both active in {place}.",
    'The paragraph says "{work} premiered in {place}."',
    "Therefore, {person} is older by {gap} years.",
    "Okay.",
]
MONTHS = ["January", "February", "March", "June", "Sept.", "Oct.", "December"]
NATIONALITIES = [
    "American",
    "Swedish",
    "Colombian",
    "Japanese",
    "Icelandic",
    "Chinese",
    "British",
]


def fill(template: str, rng: random.Random) -> str:
    people = rng.sample(PEOPLE, 2)
    works = rng.sample(WORKS, 2)
    return template.format(
        person=people[0],
        person2=people[1],
        work=works[0],
        work2=works[1],
        place=rng.choice(PLACES),
        year=rng.randint(1890, 2020),
        year2=rng.randint(1890, 2020),
        month=rng.choice(MONTHS),
        day=rng.randint(1, 28),
        gap=rng.randint(2, 60),
        money=f"{rng.uniform(1, 500):.2f}",
        ratio=f"{rng.uniform(1, 99):.1f}",
        nationality=rng.choice(NATIONALITIES),
    )


def paragraph(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        return "\n".join(f"{n}. {fill(rng.choice(SENTENCES), rng)}" for n in range(1, rng.randint(3, 5)))
    if kind < 0.4:
        return "\n".join(f"- {fill(rng.choice(SENTENCES), rng)}" for _ in range(rng.randint(2, 4)))
    return " ".join(fill(rng.choice(SENTENCES), rng) for _ in range(rng.randint(2, 5)))


def make_response(rng: random.Random, tokenizer, reasoning_tokens: int) -> str:
    paragraphs = [f"Okay, so the question asks who directed {rng.choice(WORKS)} and when they were born."]
    # Add paragraphs while the reasoning stays within the target, then one more if it is still short by a lot.
    while True:
        candidate = [*paragraphs, paragraph(rng)]
        length = len(tokenizer.encode("\n\n".join(candidate), add_special_tokens=False))
        if length > reasoning_tokens and length - reasoning_tokens > reasoning_tokens // 20:
            break
        paragraphs = candidate
        if length >= reasoning_tokens:
            break
    answer = fill("{person}", rng)
    return "\n\n".join(paragraphs) + f"\n</think>\n\nThe answer is \\boxed{{{answer}}}."


def released_labels(ids: list[int], tokenizer, steps, verdicts) -> list[int]:
    """The released procedure: each sentence's verdict over its stand-alone token count, from position 0."""
    labels = [0] * len(ids)
    position = 0
    for step, verdict in zip(steps, verdicts):
        count = len(tokenizer.encode(step.text, add_special_tokens=False))
        for index in range(position, min(position + count, len(ids))):
            labels[index] = verdict
        position += count
    return labels


def qwen_tokenizer():
    from fspo_testing.tiny_model import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=40)
    parser.add_argument("--reasoning-tokens", type=int, default=575)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokenizer = qwen_tokenizer()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    token_labels(tokenizer.encode("Warm up."), tokenizer, [], [])  # builds the per-tokenizer byte table once
    first_call_seconds = time.perf_counter() - started

    reasoning_counts, response_counts, fspo_correct, released_correct = [], [], [], []
    fspo_seconds, released_seconds, steps_per_response = [], [], []
    for _ in range(args.responses):
        ids = tokenizer.encode(
            make_response(rng, tokenizer, args.reasoning_tokens),
            add_special_tokens=False,
        )
        ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        text = tokenizer.decode(ids, skip_special_tokens=True)
        steps = reasoning_steps(text)
        verdicts = [rng.choice([-1, 1]) for _ in steps]
        spans = [(s.start, s.end) for s in steps]

        offsets = labels_module._prefix_decode_offsets(ids, tokenizer, True, text)
        truth = labels_module.labels_from_offsets(offsets, text, spans, verdicts)
        started = time.perf_counter()
        fspo = token_labels(ids, tokenizer, spans, verdicts, skip_special_tokens=True)
        fspo_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        released = released_labels(ids, tokenizer, steps, verdicts)
        released_seconds.append(time.perf_counter() - started)

        reasoning_end = reasoning_span(text)[1]
        reasoning = [i for i, (start, _) in enumerate(offsets) if start < reasoning_end]
        reasoning_counts.append(len(reasoning))
        response_counts.append(len(ids))
        steps_per_response.append(len(steps))
        fspo_correct.append(sum(fspo[i] == truth[i] for i in reasoning) / len(reasoning))
        released_correct.append(sum(released[i] == truth[i] for i in reasoning) / len(reasoning))

    print(f"tokenizer: Qwen2 byte-level BPE ({Path(tokenizer.name_or_path).parent.name})")
    print(f"responses: {args.responses}")
    print(f"tokens per response (mean): {statistics.mean(response_counts):.0f}")
    print(
        f"reasoning tokens per response (mean, min-max): {statistics.mean(reasoning_counts):.0f} "
        f"({min(reasoning_counts)}-{max(reasoning_counts)})"
    )
    print(f"reasoning steps per response (mean): {statistics.mean(steps_per_response):.1f}")
    print(f"fspo label accuracy on reasoning tokens: {100 * statistics.mean(fspo_correct):.2f}%")
    print(
        f"released procedure label accuracy on reasoning tokens: {100 * statistics.mean(released_correct):.2f}% "
        f"(worst response {100 * min(released_correct):.2f}%)"
    )
    print(
        f"fspo labelling time per response: {1000 * statistics.mean(fspo_seconds):.2f} ms "
        f"(max {1000 * max(fspo_seconds):.2f} ms)"
    )
    print(f"released procedure labelling time per response: {1000 * statistics.mean(released_seconds):.2f} ms")
    print(f"fspo first call (builds the tokenizer's byte table once): {1000 * first_call_seconds:.0f} ms")
    print(f"fspo labelling time for a 2,048-token response: {1000 * time_long_response(tokenizer, rng):.2f} ms")


def time_long_response(tokenizer, rng: random.Random, tokens: int = 2048, repeats: int = 20) -> float:
    ids = tokenizer.encode(make_response(rng, tokenizer, tokens), add_special_tokens=False)[:tokens]
    text = tokenizer.decode(ids)
    spans = [(s.start, s.end) for s in reasoning_steps(text + "</think>")]
    verdicts = [rng.choice([-1, 1]) for _ in spans]
    started = time.perf_counter()
    for _ in range(repeats):
        token_labels(ids, tokenizer, spans, verdicts)
    return (time.perf_counter() - started) / repeats


if __name__ == "__main__":
    main()
