"""A reasoning step's clauses and the names that link them, for sentence-level support.

A step such as "Nora works for Bolt Mills, which is headquartered in Lima" states two facts, which the
evidence states in two sentences. Scored against its best *single* sentence it would look half
supported; scored against the *whole* evidence, a step whose words come from two unrelated sentences
("Nora was born in Lima" from "Nora was born in Kelton. Sam was born in Lima.") looks fully supported.
A step is therefore cut into clauses, and a clause into pieces linked by a shared name; each piece is
checked against its own best sentence (:func:`fspo.verifiers.lexical.sentence_support`).

Rules (English, general, nothing about one data set):

- A clause ends at ``; ( ) — –``, at ``,`` and ``:`` before a space, and before a coordinating or relative
  word (``and``, ``but``, ``so``, ``then``, ``therefore``, ``thus``, ``because``, ``since``, ``while``,
  ``which``, ``who``, ``whom``, ``whose``, ``where``).
- A clause that has no subject of its own is about the previous clause's last name (its trailing run of
  capitalised words or numbers: "Bolt Mills" in "Nora works for Bolt Mills") and takes it along: a relative
  clause ("which is headquartered in Lima") or any clause that opens with a lower-case word other than a
  coordinating one (an apposition, "a city in Peru"; a reduced relative, "headquartered in Lima"). Without
  it "Nora, who was born in Lima" would check "born in Lima" against any birth in Lima.
- Inside a clause, a name can link two facts with no boundary at all ("Nora works for Bolt Mills
  headquartered in Lima"): a clause may be cut right after a name, the next piece starting with that name
  again (:func:`link_cuts`). A piece that does not start with a name (a relation word such as "born")
  never links, so "Nora was born in Lima" stays one piece.
"""

from __future__ import annotations

import re

_RELATIVE = ("which", "who", "whom", "whose", "where")
_COORDINATING = ("and", "but", "so", "then", "therefore", "thus", "because", "since", "while")
# A boundary: punctuation that closes a clause (commas and colons only before a space, so "1,250" and
# "10:30" stay whole), or the space before a connective word (which stays in the clause it opens).
_BOUNDARY = re.compile(
    r"\s*[,:](?=\s|$)\s*|\s*[;()\u2014\u2013]\s*|\s+(?=(?:" + "|".join(_COORDINATING + _RELATIVE) + r")\b)",
    re.IGNORECASE,
)
_STRIP = "\"'()[]{}.,;:!?“”‘’"


def words(text: str) -> list[str]:
    """The whitespace-separated words of ``text`` (punctuation kept: content tokens never span a space)."""
    return text.split()


def is_name_word(word: str) -> bool:
    """A word that is part of a name: capitalised or a number."""
    core = word.strip(_STRIP)
    return bool(core) and (core[0].isupper() or core[0].isdigit())


def antecedent(clause: str) -> str:
    """What a following subject-less clause is about: ``clause``'s trailing run of name words ('' if it
    ends in none)."""
    run = words(clause)
    start = len(run)
    while start > 0 and is_name_word(run[start - 1]):
        start -= 1
    return " ".join(word.strip(_STRIP) for word in run[start:])


def _lacks_subject(clause: str) -> bool:
    first = words(clause)[0].strip(_STRIP)
    if not first:
        return False
    return first.lower() in _RELATIVE or (first[0].islower() and first.lower() not in _COORDINATING)


def split_clauses(step: str) -> list[str]:
    """The clauses of ``step`` in order (see the module doc), a subject-less clause prefixed by its antecedent.

    Every word of ``step`` is in at least one clause; only the boundary punctuation is dropped.
    """
    clauses: list[str] = []
    for part in _BOUNDARY.split(step):
        part = part.strip() if part else ""
        if not part:
            continue
        if clauses and _lacks_subject(part):
            head = antecedent(clauses[-1])
            part = f"{head} {part}" if head else part
        clauses.append(part)
    return clauses


def link_cuts(clause_words: list[str]) -> list[tuple[int, int]]:
    """Where ``clause_words`` may be cut into two linked pieces: ``(start, end)`` of each run of name words
    that ends before the last word; the first piece ends at ``end``, the next starts again at ``start``."""
    cuts = []
    index = 0
    while index < len(clause_words):
        if not is_name_word(clause_words[index]):
            index += 1
            continue
        start = index
        while index < len(clause_words) and is_name_word(clause_words[index]):
            index += 1
        if index < len(clause_words):
            cuts.append((start, index))
    return cuts
