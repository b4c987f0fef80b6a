"""HotpotQA-style records (HotpotQA, 2WikiMultiHopQA): question, answer, context and supporting facts.

Both sets come in two layouts, and both are read:

- the original JSON: ``context = [[title, [sentence, ...]], ...]``,
  ``supporting_facts = [[title, sentence_id], ...]``;
- the Hugging Face layout: ``context = {"title": [...], "sentences": [[...], ...]}``,
  ``supporting_facts = {"title": [...], "sent_id": [...]}`` (some mirrors store these as JSON strings).

The evidence is the gold supporting paragraphs: every paragraph named by a supporting fact, once, in
the order first named, each written ``"<title>: <sentences>"`` and joined by a blank line.
"""

from __future__ import annotations

from fspo.data.builder import Example
from fspo.data.io import SourceFieldError, dedupe, field_text, get_field, get_text
from fspo.utils.input_files import InputFileError, parse_json, parse_json_bytes


def _decoded(value, where: str, name: str):
    """A field some mirrors store as a JSON string, parsed (strict UTF-8 for bytes); other values as they are."""
    if isinstance(value, (str, bytes)):
        try:
            if isinstance(value, bytes):
                return parse_json_bytes(where, value, None, f", field {name!r}")
            return parse_json(where, value, None, f", field {name!r}")
        except InputFileError as error:
            raise SourceFieldError(f"{error} (a field stored as a string must be JSON)") from None
    return value


def _entries(value, where: str, name: str):
    """A list-like field part (a list, tuple or numpy array), or one error naming the field."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise SourceFieldError(f"{where}: field {name!r} must hold a list, got a {type(value).__name__}")
    return value


def paragraphs_by_title(context, where: str) -> dict[str, list[str]]:
    """{title: sentences} from either context layout; None/NaN context -> {}."""
    context = _decoded(context, where, "context")
    if context is None or isinstance(context, float):
        return {}
    if isinstance(context, dict):
        titles = _entries(get_field(context, "title", where + ", field 'context'"), where, "context")
        sentences = _entries(
            get_field(context, ("sentences", "content"), where + ", field 'context'"), where, "context"
        )
        pairs = zip(titles, sentences)
    else:
        pairs = _entries(context, where, "context")
    paragraphs: dict[str, list[str]] = {}
    for pair in pairs:
        if isinstance(pair, (str, bytes, dict)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise SourceFieldError(f"{where}: field 'context' entries must be [title, sentences]")
        title, sentences = pair
        if sentences is None or isinstance(sentences, (str, bytes)):
            sentences = [sentences]
        elif not hasattr(sentences, "__iter__"):
            raise SourceFieldError(f"{where}: field 'context' entries must be [title, sentences]")
        paragraphs.setdefault(field_text(title, where, "context"), [field_text(s, where, "context") for s in sentences])
    return paragraphs


def supporting_titles(supporting_facts, where: str) -> list[str]:
    """Titles named by the supporting facts, first occurrence order, no repeats."""
    facts = _decoded(supporting_facts, where, "supporting_facts")
    if facts is None or isinstance(facts, float):
        return []
    if isinstance(facts, dict):
        titles = _entries(get_field(facts, "title", where + ", field 'supporting_facts'"), where, "supporting_facts")
    else:
        facts = _entries(facts, where, "supporting_facts")
        if any(isinstance(fact, (str, bytes, dict)) or not hasattr(fact, "__len__") or len(fact) < 1 for fact in facts):
            raise SourceFieldError(f"{where}: field 'supporting_facts' entries must be [title, sentence_id]")
        titles = [fact[0] for fact in facts]
    return dedupe(field_text(title, where, "supporting_facts") for title in titles)


def gold_evidence(record: dict, where: str) -> str:
    """The record's gold supporting paragraphs as one string ("" when none can be found)."""
    paragraphs = paragraphs_by_title(get_field(record, "context", where), where)
    titles = supporting_titles(get_field(record, "supporting_facts", where), where)
    blocks = []
    for title in titles:
        text = " ".join(s for s in paragraphs.get(title, []) if s)
        if text:
            blocks.append(f"{title}: {text}")
    return "\n\n".join(dedupe(blocks))


def convert_multihop(record: dict, where: str, args, rng) -> Example | None:
    """A HotpotQA/2Wiki record as an Example; records without an answer or any evidence are skipped."""
    question = get_text(record, "question", where)
    answer = get_text(record, "answer", where)
    evidence = gold_evidence(record, where)
    if not question or not answer or not evidence:
        return None
    return Example(question=question, ground_truth=answer, evidence=evidence)
