"""Verifier quality: the metrics on hand-made scores, labelled data and its splits, `fspo verify --labelled`."""

from __future__ import annotations

import functools
import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.cli import main as fspo_main
from fspo.data.synthetic import restate
from fspo.verifier_tools.labelled import (
    LabelledPair,
    halueval_pairs,
    is_heldout,
    read_labelled,
    synthetic_pairs,
)
from fspo.verifier_tools.quality import (
    auroc,
    balanced_accuracy,
    best_threshold,
    reliability_bins,
    summarise,
)

# --- metrics ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "labels", "expected"),
    [
        ([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0], 1.0),  # perfect separation
        ([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0], 0.0),  # perfectly wrong
        ([0.5, 0.5, 0.5, 0.5], [1, 0, 1, 0], 0.5),  # all tied: chance
        ([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0], 0.75),  # 3 of 4 (positive, negative) pairs ordered
        ([0.8, 0.5, 0.5, 0.2], [1, 1, 0, 0], 0.875),  # a cross-class tie counts one half: 3.5 / 4
        ([1.0, 1.0, 1.0, 0.7], [1, 1, 0, 0], 0.75),  # lexical-like: (2*0.5 + 2*1) / 4
        ([0.3, 0.7, 0.7, 0.2, 0.9], [0, 1, 0, 0, 1], 5.5 / 6),
    ],
)
def test_auroc_on_hand_made_scores(scores, labels, expected):
    assert auroc(scores, labels) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("scores", "labels", "threshold", "expected"),
    [
        ([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0], 0.5, 0.5),  # TPR 1/2, TNR 1/2
        ([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0], 0.4, 0.75),  # >= is supported: TPR 1, TNR 1/2
        ([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0], 0.95, 0.5),  # nothing supported
        ([0.9, 0.8, 0.7, 0.1], [1, 1, 1, 0], 0.75, (2 / 3 + 1) / 2),  # unbalanced classes weigh equally
    ],
)
def test_balanced_accuracy_at_a_threshold(scores, labels, threshold, expected):
    assert balanced_accuracy(scores, labels, threshold) == pytest.approx(expected)


def test_best_threshold_picks_the_lowest_of_equally_good_observed_scores():
    assert best_threshold([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0]) == (0.4, 0.75)
    assert best_threshold([1.0, 1.0, 1.0, 0.7, 0.6], [1, 1, 0, 0, 0]) == (1.0, pytest.approx((1 + 2 / 3) / 2))
    assert best_threshold([0.2, 0.1], [0, 1]) == (0.1, 0.5)  # reversed: no threshold beats chance


@pytest.mark.parametrize(
    ("scores", "labels", "message"),
    [
        ([0.1, 0.2], [1, 1], "both supported and unsupported"),
        ([0.1, 0.2], [1, 2], "labels must be 0"),
        ([0.1], [1, 0], "1 scores but 2 labels"),
        ([math.nan, 0.2], [1, 0], "NaN"),
    ],
)
def test_metrics_reject_bad_input(scores, labels, message):
    with pytest.raises(ValueError, match=message):
        auroc(scores, labels)


_scored = st.lists(
    st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]), st.integers(0, 1)), min_size=2, max_size=40
).filter(lambda rows: len({label for _, label in rows}) == 2)


@settings(max_examples=200, deadline=None)
@given(_scored)
def test_auroc_is_the_share_of_correctly_ordered_pairs(rows):
    scores, labels = [s for s, _ in rows], [label for _, label in rows]
    ordered = [
        1.0 if p > n else 0.5 if p == n else 0.0
        for (p, lp), (n, ln) in itertools.product(rows, rows)
        if lp == 1 and ln == 0
    ]
    assert auroc(scores, labels) == pytest.approx(sum(ordered) / len(ordered))
    flipped = [1 - label for label in labels]
    assert auroc(scores, flipped) == pytest.approx(1 - auroc(scores, labels))
    assert auroc([s**3 for s in scores], labels) == pytest.approx(auroc(scores, labels))  # rank-only


@settings(max_examples=200, deadline=None)
@given(_scored)
def test_best_threshold_beats_every_candidate(rows):
    scores, labels = [s for s, _ in rows], [label for _, label in rows]
    threshold, accuracy = best_threshold(scores, labels)
    assert accuracy == pytest.approx(balanced_accuracy(scores, labels, threshold))
    for candidate in [*scores, 1.5]:
        assert balanced_accuracy(scores, labels, candidate) <= accuracy + 1e-12


def test_reliability_bins_and_summary():
    scores = [0.05, 0.15, 0.12, 0.95, 1.0, math.nan]
    labels = [0, 0, 1, 1, 1, 0]
    bins = reliability_bins(scores, labels, bins=10)
    assert [(b["low"], b["count"]) for b in bins] == [(0.0, 1), (0.1, 2), (0.9, 2)]  # 1.0 joins the last bin
    assert bins[1]["supported_rate"] == 0.5 and bins[1]["mean_score"] == pytest.approx(0.135)
    figures = summarise(scores, labels, threshold=0.5)
    assert (figures["pairs"], figures["supported"], figures["unsupported"], figures["unverifiable"]) == (6, 3, 3, 1)
    assert figures["auroc"] == pytest.approx(5 / 6)  # the NaN pair is left out: 2 negatives x 3 positives
    assert figures["balanced_accuracy"] == pytest.approx((2 / 3 + 1) / 2)
    assert (figures["best_threshold"], figures["best_balanced_accuracy"]) == (0.95, pytest.approx((2 / 3 + 1) / 2))


# --- labelled data ------------------------------------------------------------------------------------


def _jsonl(tmp_path, lines, name="claims.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_labelled_jsonl_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"evidence": ["Paris is in France.", "It is large."], "claim": "Paris is in France.", "label": 1},
        {"evidence": "Paris is in France.", "claim": "Paris is in Spain.", "label": False},
    ]
    expected = [
        ("Paris is in France.\nIt is large.", "Paris is in France.", 1),
        ("Paris is in France.", "Paris is in Spain.", 0),
    ]
    from_jsonl = read_labelled(_jsonl(tmp_path, [json.dumps(r) for r in rows] + [""]))
    pq.write_table(pa.Table.from_pylist(rows[1:]), tmp_path / "claims.parquet")
    from_parquet = read_labelled(tmp_path / "claims.parquet")
    assert [p[:3] for p in from_jsonl] == expected
    assert [p[:3] for p in from_parquet] == expected[1:]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"evidence": "e", "claim": "c", "label": 1}', "{oops"], r"line 2: not valid JSON"),
        (['{"evidence": "e", "label": 1}'], r"line 1: object missing required field `claim`"),
        (
            ['{"evidence": "e", "claim": "c", "label": "yes"}'],
            r"line 1: field label: expected `bool \| int`, got `str`",
        ),
        (
            ['{"evidence": "e", "claim": "c", "label": 0.5}'],
            r"line 1: field label: expected `bool \| int`, got `float`",
        ),
        (['{"evidence": "e", "claim": "c", "label": 2}'], r"line 1: field label: invalid enum value 2"),
        (['{"evidence": 3, "claim": "c", "label": 1}'], r"line 1: field evidence: expected `str \| array`, got `int`"),
        ([""], r"no labelled rows"),
    ],
)
def test_read_labelled_errors_name_the_line(tmp_path, lines, message):
    with pytest.raises(ValueError, match=message):
        read_labelled(_jsonl(tmp_path, lines))


def test_read_labelled_missing_and_broken_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no labelled file"):
        read_labelled(tmp_path / "absent.jsonl")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="not a readable parquet file"):
        read_labelled(tmp_path / "bad.parquet")


def _groups(pairs):
    return {p.group for p in pairs}


@pytest.mark.parametrize("source", [halueval_pairs, synthetic_pairs, functools.partial(synthetic_pairs, restated=True)])
def test_no_heldout_row_is_in_the_training_split(source):
    train, heldout = source("train"), source("heldout")
    assert train and heldout
    assert not _groups(train) & _groups(heldout)  # no question on both sides
    assert not {(p.evidence, p.claim) for p in train} & {(p.evidence, p.claim) for p in heldout}
    share = len(_groups(heldout)) / (len(_groups(train)) + len(_groups(heldout)))
    assert 0.15 < share < 0.25
    assert source("heldout") == heldout  # deterministic
    assert _groups(source("heldout", seed=1)) != _groups(heldout)  # the seed moves rows
    for pairs in (train, heldout):  # two claims a row, one of each label, so every split is balanced
        assert sum(p.label for p in pairs) * 2 == len(pairs)


def test_the_verifier_trains_only_on_training_rows():
    from fspo.verifier_tools.finetune import load_training_pairs

    training = load_training_pairs(["halueval", "synthetic", "synthetic-restated"])
    heldout = halueval_pairs("heldout") + synthetic_pairs("heldout")  # restated: the same worlds, same groups
    assert len(training) == len(halueval_pairs("train")) + 2 * len(synthetic_pairs("train"))
    assert not _groups(training) & _groups(heldout)
    assert not any(is_heldout(p.group) for p in training)


RELATIONS = (
    " was born in ",
    " is a city in ",
    " works for ",
    " is headquartered in ",
    " was founded in ",
    " was mentored by ",
)


def test_halueval_and_synthetic_claims():
    pair = halueval_pairs("all")[:2]
    assert pair[0].label == 1 and pair[1].label == 0
    assert pair[0].claim == f"The answer to '{pair[0].group}' is Arthur's Magazine."
    assert pair[0].evidence == pair[1].evidence and "Arthur's Magazine" in pair[0].evidence
    for true, false in zip(*[iter(synthetic_pairs("all", worlds=200))] * 2):
        assert (true.label, false.label) == (1, 0)
        assert true.claim in true.evidence and false.claim not in false.evidence
        # the false fact keeps the subject and relation: only the object differs
        relation = next(r for r in RELATIONS if r in true.claim)
        assert false.claim.startswith(true.claim.split(relation)[0] + relation)
    verbatim, restated = synthetic_pairs("all", worlds=50), synthetic_pairs("all", worlds=50, restated=True)
    assert [(p.evidence, p.label, p.group) for p in verbatim] == [(p.evidence, p.label, p.group) for p in restated]
    assert all(p.claim not in p.evidence for p in restated)
    assert restated[0].claim == restate(verbatim[0].claim) != verbatim[0].claim


@pytest.mark.parametrize(
    ("fact", "restated"),
    [
        ("Zapu Viorotu works for Mune Labs.", "Zapu Viorotu is employed by Mune Labs."),
        ("Fatio Rimu was born in Lenvale.", "Fatio Rimu's birthplace is Lenvale."),
        ("Lenvale is a city in Zaekrar.", "Lenvale lies in Zaekrar."),
        ("Mune Labs is headquartered in Tosdell.", "The headquarters of Mune Labs are in Tosdell."),
        ("Mune Labs was founded in 1850.", "Mune Labs was established in 1850."),
        ("Babo Kira was mentored by Tosu Lem.", "Tosu Lem was the mentor of Babo Kira."),
    ],
)
def test_restate_covers_every_relation(fact, restated):
    assert restate(fact) == restated


# --- fspo verify --labelled ---------------------------------------------------------------------------

ROWS = [
    {"evidence": "Paris is the capital of France.", "claim": "The capital of France is Paris.", "label": 1},
    {"evidence": "Paris is the capital of France.", "claim": "The capital of Spain is Paris.", "label": 0},
    {"evidence": "The Seine flows through Paris.", "claim": "The Seine flows through Lyon.", "label": 0},
    {"evidence": "The Seine flows through Paris.", "claim": "Paris lies on the Seine.", "label": 1},
]


def test_verify_labelled_prints_the_quality_figures(tmp_path, capsys):
    path = _jsonl(tmp_path, [json.dumps(r) for r in ROWS])
    chart = tmp_path / "charts" / "reliability.png"  # a missing folder is made, as for every output path
    assert (
        fspo_main(
            ["verify", "--labelled", str(path), "--verifier", "lexical", "--threshold", "0.5", "--chart", str(chart)]
        )
        == 0
    )
    out = capsys.readouterr().out
    # lexical scores 1, 2/3, 2/3 and 2/3 ("lies" is not in the evidence): the supported pairs 1 and 2/3
    assert "4 pairs: 2 supported, 2 unsupported, 0 unverifiable" in out
    assert "AUROC                              0.750" in out
    assert "balanced accuracy at 0.5           0.500" in out
    assert "calibrated threshold               1.000 (balanced accuracy 0.750)" in out
    assert chart.stat().st_size > 1000 and chart.read_bytes()[:4] == b"\x89PNG"


def test_verify_chart_replaces_its_own_chart_not_a_users_file_or_link(tmp_path, capsys):
    """fspo.utils.output_dir's rule for --chart: a re-run replaces fspo's chart; a user's image of that name, or a
    link, is refused by name before anything is scored, and left as it was."""
    path = _jsonl(tmp_path, [json.dumps(r) for r in ROWS])
    charts = tmp_path / "charts"
    charts.mkdir()
    argv = ["verify", "--labelled", str(path), "--verifier", "lexical", "--chart"]
    assert fspo_main([*argv, str(charts / "mine.png")]) == 0
    assert fspo_main([*argv, str(charts / "mine.png")]) == 0  # its own chart: replaced
    (charts / "user.png").write_bytes(b"user image")
    (charts / "link.png").symlink_to(tmp_path / "target.png")
    capsys.readouterr()
    for name, why in (("user.png", "was not written by fspo"), ("link.png", "is a symbolic link")):
        assert fspo_main([*argv, str(charts / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{name} {why}" in err, err
    assert (charts / "user.png").read_bytes() == b"user image" and not (tmp_path / "target.png").exists()


def test_verify_labelled_json_and_builtin_source(capsys):
    assert fspo_main(["verify", "--labelled", "synthetic", "--limit", "40", "--json", "--threshold", "1.0"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["pairs"] == 40 and figures["supported"] == 20
    assert figures["source"] == "synthetic" and figures["pairs_per_s"] > 0
    # every gold fact is in the evidence, so lexical scores each supported claim 1.0
    assert figures["threshold"] == 1.0 and figures["best_threshold"] == 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--labelled", "absent.jsonl"], "fspo verify: no labelled file 'absent.jsonl'"),
        (["--labelled", "{path}", "--limit", "1"], "need both supported (1) and unsupported (0) rows, got labels [1]"),
        (["--labelled", "{path}", "--verifier", "nope"], "unknown fspo.verifier.name 'nope'"),
    ],
)
def test_verify_labelled_errors_exit_2_with_one_line(tmp_path, capsys, args, message):
    path = _jsonl(tmp_path, [json.dumps(r) for r in ROWS])
    assert fspo_main(["verify", *[a.format(path=path) for a in args]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_verify_needs_input_or_labelled_not_both(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        fspo_main(["verify", "rows.jsonl", "--labelled", "synthetic"])
    assert exit_.value.code == 2 and "not both" in capsys.readouterr().err


def test_labelled_pair_is_a_plain_tuple():
    assert LabelledPair("e", "c", 1)[:3] == ("e", "c", 1)
