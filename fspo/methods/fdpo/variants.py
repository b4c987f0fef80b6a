"""F-DPO's synthetic hallucinated variants: a factual response rewritten with a few factual errors, entered as an
inverted pair (the corrupted response chosen, h = 1; the factual one rejected, h = 0) so that F-DPO's flip swaps
it and its margin acts.

F-DPO's authors (VectorInstitute/Factual-Preference-Alignment, ``src/aixpert/data_construction/``) ask GPT-4o-mini
to rewrite a factual chosen answer "into a subtly incorrect version with 2-3 factual errors"
(``utils/prompt_templates.py`` lines 40-57), enter it as ``chosen = corrupted, h_w = 1, h_l = 0``
(``utils/synthetic_utils.py`` lines 52-58), and their flip (``utils/data_utils.py`` lines 120-125) swaps it back
with ``flipped = True``. Two corruptions here:

- ``swap`` (offline, rule-based): in 2-3 reasoning steps, the last entity the evidence names is replaced by
  another entity the evidence names that the step does not (a year by a year, a name by a name of as many words
  where there is one). In the synthetic world every relation is a function of its subject, so swapping the
  object makes the claim false, as ``fspo.data.synthetic`` builds its false claims; on other evidence-grounded
  rows it makes the step unsupported by that evidence.
- ``llm``: the authors' rewrite, over an OpenAI-compatible server (:class:`fspo.utils.chat_client.ChatClient`), with
  their prompts' wording.

The label of a variant is 1 by construction, as the authors'; how many of them the step verifier also flags is
counted (``fspo fdpo build-pairs`` prints it).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from fspo.steps import reasoning_steps

# A capitalised name of one or more words, or a year-like number.
_ENTITY = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*|\b\d{3,4}\b")
# Capitalised only because they open a sentence.
_SENTENCE_WORDS = frozenset(
    "The A An It He She They We I This That These Those In On At So Then Thus Therefore Hence Since Because "
    "First Next Finally Let Now Also And But Or If".split()
)

# F-DPO's corruption prompts (utils/prompt_templates.py lines 40-57), in their words.
CORRUPTION_SYSTEM_PROMPT = (
    "You are a factual corruption generator.\n\nRewrite a correct answer into a subtly incorrect version with 2-3 "
    "factual errors.\nIt must remain fluent, confident, and plausible."
)
CORRUPTION_USER_TEMPLATE = (
    "PROMPT:\n{question}\n\nCORRECT ANSWER:\n{answer}\n\nTASK:\nRewrite the answer so that it becomes factually "
    "wrong, introducing subtle hallucinations while sounding confident and coherent."
)


def _entity(span: str) -> str:
    """A capitalised span without the sentence-opening words in front ("The Vigio Shipping" -> "Vigio Shipping")."""
    words = span.split()
    while words and words[0] in _SENTENCE_WORDS:
        words.pop(0)
    return " ".join(words)


def evidence_entities(evidence: str) -> list[str]:
    """The names and years the evidence mentions, in order of first mention, each once."""
    found = (_entity(match.group()) for match in _ENTITY.finditer(evidence))
    return list(dict.fromkeys(entity for entity in found if entity))


def _mentions(text: str, entity: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(entity)}(?![\w-])", text) is not None


def _same_kind(a: str, b: str) -> bool:
    return a.isdigit() == b.isdigit() and (a.isdigit() or len(a.split()) == len(b.split()))


def swap_entity(step: str, entities: Sequence[str], rng: random.Random) -> str | None:
    """``step`` with the last entity of ``entities`` it mentions that can be swapped replaced by another it does not
    mention (of the same kind where there is one); None when there is none.

    The last: in a subject-relation-object sentence the object, and a relation that is a function of its subject
    (one employer, one birthplace) is false with any other object.
    """
    mentioned = sorted(
        (match.start(), match.end(), entity)
        for entity in entities
        for match in re.finditer(rf"(?<![\w-]){re.escape(entity)}(?![\w-])", step)
    )
    for start, end, entity in reversed(mentioned):
        others = [
            other
            for other in entities
            if other.isdigit() == entity.isdigit()
            and other not in entity  # "Vigio" in "Vigio Shipping" would be half a swap
            and entity not in other
            and not _mentions(step, other)
        ]
        same = [other for other in others if _same_kind(other, entity)]
        if same or others:
            return step[:start] + rng.choice(same or others) + step[end:]
    return None


def swap_corruption(response: str, evidence: str, rng: random.Random, errors: tuple[int, int] = (2, 3)) -> str | None:
    """``response`` with an entity swapped in ``errors`` (at most as many as can be) of its reasoning steps; None when
    no step mentions an entity of the evidence that can be swapped."""
    entities = evidence_entities(evidence)
    swapped = []
    for step in reasoning_steps(response, claims_only=True):
        new = swap_entity(step.text, entities, rng)
        if new is not None:
            swapped.append((step, new))
    if not swapped:
        return None
    chosen = sorted(rng.sample(swapped, min(len(swapped), rng.randint(*errors))), key=lambda item: item[0].start)
    out, last = [], 0
    for step, new in chosen:
        out += [response[last : step.start], new]
        last = step.end
    return "".join(out) + response[last:]


def llm_corruption(client, question: str, response: str) -> str | None:
    """The authors' rewrite of ``response`` by a chat model (a :class:`fspo.utils.chat_client.ChatClient`); None when the
    server gave no reply, or an empty one or the response unchanged."""
    reply = client.reply(
        [
            {"role": "system", "content": CORRUPTION_SYSTEM_PROMPT},
            {"role": "user", "content": CORRUPTION_USER_TEMPLATE.format(question=question, answer=response)},
        ]
    )
    if reply is None or not reply.strip() or reply.strip() == response.strip():
        return None
    return reply.strip()
