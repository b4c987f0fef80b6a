"""A reasoning step's clauses: the parts of one step that each state one fact, for sentence-level support.

A step such as "Nora works for Bolt Mills, which is headquartered in Lima" states two facts, which the
evidence states in two sentences. Scored against its best *single* sentence it would look half
supported; scored against the *whole* evidence, a step whose words come from two unrelated sentences
("Nora was born in Lima" from "Nora was born in Kelton. Sam was born in Lima.") looks fully supported.
Cutting the step into clauses and checking each clause against its own best sentence answers both.

Rules (English, general, nothing about one data set):

- A clause ends at ``; ( ) — –``, at ``,`` and ``:`` before a space, and before a coordinating or relative word (``and``, ``but``, ``so``,
  ``then``, ``therefore``, ``thus``, ``because``, ``since``, ``while``, ``which``, ``who``, ``whom``,
  ``whose``, ``where``).
- A clause that opens with a relative pronoun (``which``, ``who``, ``whom``, ``whose``, ``where``) is about
  its antecedent, so it takes the previous clause's last name along: its trailing run of capitalised words
  or numbers ("Bolt Mills" in "Nora works for Bolt Mills"), or its last word when it ends in none. Without
  it "Nora, who was born in Lima" would check "born in Lima" against any birth in Lima.
- A clause with no content word ("and so") states nothing and is dropped by the caller's tokenizer.
"""

from __future__ import annotations

import re

_RELATIVE = ("which", "who", "whom", "whose", "where")
_CONNECTIVES = ("and", "but", "so", "then", "therefore", "thus", "because", "since", "while", *_RELATIVE)
# A boundary: punctuation that closes a clause, or the space before a connective word (the word stays in
# the clause it opens, so a relative clause can be recognised).
# Commas and colons only before a space: "1,250" and "10:30" stay whole.
_BOUNDARY = re.compile(
    r"\s*[,;:](?=\s|$)\s*|\s*[;()\u2014\u2013]\s*|\s+(?=(?:" + "|".join(_CONNECTIVES) + r")\b)", re.IGNORECASE
)
_OPENS_RELATIVE = re.compile(r"^(?:" + "|".join(_RELATIVE) + r")\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W_][\w'’.-]*")


def _is_name_word(word: str) -> bool:
    return word[0].isupper() or word[0].isdigit()


def antecedent(clause: str) -> str:
    """What a following relative clause is about: ``clause``'s trailing name (its last run of capitalised
    words or numbers), else its last word; '' for a clause without words."""
    words = [word.rstrip(".") for word in _WORD.findall(clause)]
    words = [word for word in words if word]
    if not words:
        return ""
    start = len(words)
    while start > 0 and _is_name_word(words[start - 1]):
        start -= 1
    return " ".join(words[start:] or words[-1:])


def split_clauses(step: str) -> list[str]:
    """The clauses of ``step`` in order (see the module doc), a relative clause prefixed by its antecedent.

    Every word of ``step`` is in at least one clause; only the boundary punctuation is dropped.
    """
    parts = [part.strip() for part in _BOUNDARY.split(step) if part and part.strip()]
    clauses: list[str] = []
    for part in parts:
        if clauses and _OPENS_RELATIVE.match(part):
            head = antecedent(clauses[-1])
            part = f"{head} {part}" if head else part
        clauses.append(part)
    return clauses
