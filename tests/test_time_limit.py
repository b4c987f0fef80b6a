"""The scorer time limit: a real worker process, real math-verify, real hostile answers."""

from __future__ import annotations

import functools
import threading
import time

import pytest

from fspo.training.outcome import compute_score
from fspo.training.time_limit import ScorerTimeout, TimeLimitedScorer, custom_scorer

# math-verify evaluates this power inside one C call holding the GIL: a thread never returns from it.
TOWER = "<answer>$9^{9^{9^{9}}}$</answer>"


@pytest.fixture(scope="module")
def scorer():
    limited = TimeLimitedScorer(timeout_s=1.0)
    yield limited
    limited.close()


def test_answers_equal_the_in_process_scorer(scorer):
    for source, response, gold in [
        ("math500", "<answer>$\\frac{1}{2}$</answer>", "0.5"),
        ("gsm8k", "<answer>1,234 apples</answer>", "1234"),
        ("hotpotqa", "<answer>Paris</answer>", ["Paris", "City of Paris"]),
    ]:
        kwargs = dict(data_source=source, solution_str=response, ground_truth=gold, extra_info={})
        assert scorer(**kwargs) == compute_score(**kwargs)


def test_a_scorer_holding_the_gil_is_stopped_and_the_next_call_works(scorer):
    before = scorer.timeouts
    started = time.perf_counter()
    with pytest.raises(ScorerTimeout):
        scorer(data_source="math500", solution_str=TOWER, ground_truth="3", extra_info={})
    assert time.perf_counter() - started < 3.0
    assert scorer.timeouts == before + 1
    ok = scorer(data_source="math500", solution_str="<answer>3</answer>", ground_truth="3", extra_info={})
    assert ok["score"] == 1.0


def test_the_limit_holds_from_reward_worker_threads(scorer):
    # The reward manager scores in executor threads; several at once queue for the worker.
    results = {}

    def call(key, response):
        try:
            results[key] = scorer(data_source="math500", solution_str=response, ground_truth="3", extra_info={})
        except ScorerTimeout as error:
            results[key] = error

    threads = [threading.Thread(target=call, args=(i, TOWER if i == 1 else "<answer>3</answer>")) for i in range(3)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert time.perf_counter() - started < 15
    assert isinstance(results[1], ScorerTimeout)
    assert results[0]["score"] == results[2]["score"] == 1.0


def test_scorer_errors_reach_the_caller(scorer):
    with pytest.raises(ValueError, match="no scorer for data_source"):
        scorer(data_source="no_such_source", solution_str="<answer>x</answer>", ground_truth="x", extra_info={})


def test_a_custom_file_scorer_may_print_and_crash_its_process(tmp_path):
    module = tmp_path / "my_reward.py"
    module.write_text(
        "import os\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    print('debug output on stdout')\n"
        "    if solution_str == 'die':\n"
        "        os._exit(3)\n"
        "    return {'score': float(solution_str == ground_truth) + bonus}\n"
    )
    limited = TimeLimitedScorer(functools.partial(custom_scorer, str(module), "score", {"bonus": 0.5}), timeout_s=5)
    try:
        assert limited(data_source="x", solution_str="a", ground_truth="a") == {"score": 1.5}
        with pytest.raises(ScorerTimeout, match="exited with code 3"):
            limited(data_source="x", solution_str="die", ground_truth="a")
        assert limited(data_source="x", solution_str="b", ground_truth="a") == {"score": 0.5}
    finally:
        limited.close()


def test_close_stops_the_worker():
    limited = TimeLimitedScorer(timeout_s=5)
    process = limited._box[0].process
    limited.close()
    assert process.poll() is not None


def test_a_non_positive_limit_is_refused():
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        TimeLimitedScorer(timeout_s=0)


def test_a_worker_whose_parent_stops_waiting_kills_itself_on_its_cpu_cap():
    # An orphaned worker stuck in C would spin forever; its CPU-time alarm ends it without a Python handler.
    from fspo.training.time_limit import _Worker, default_scorer

    worker = _Worker(default_scorer, (), cpu_cap_s=0.5)
    try:
        worker.wait_ready(60)
        started = time.perf_counter()
        with pytest.raises(ScorerTimeout, match="exited with code -26"):  # SIGVTALRM
            worker.call(
                dict(data_source="math500", solution_str=TOWER, ground_truth="3"), timeout_s=None, prepare_timeout_s=60
            )
        assert time.perf_counter() - started < 10
    finally:
        worker.kill()


def test_evaluation_scores_a_stuck_response_zero_and_counts_it(scorer):
    from fspo.evaluation.pipeline import score_record

    row = {"data_source": "math500", "reward_model": {"ground_truth": "3"}, "extra_info": "not a dict"}
    record = score_record(row, [TOWER, "<answer>3</answer>"], scorer)
    assert record["sample_scores"] == [0.0, 1.0] and record["scorer_timeouts"] == 1


def test_the_verl_import_for_a_verl_named_source_does_not_count_against_the_limit():
    """`openai/gsm8k` is scored by verl, whose import takes seconds: the worker prepares it outside the limit."""
    limited = TimeLimitedScorer(timeout_s=1)
    try:
        result = limited(data_source="openai/gsm8k", solution_str="#### 72", ground_truth="72", extra_info={})
        assert result["acc"] == 1.0 and limited.timeouts == 0
    finally:
        limited.close()


def test_a_scorer_that_prepares_itself_imports_math_verify_only_for_a_math_source(tmp_path):
    """fspo's scorer prepares each source's imports (fspo.training.outcome.prepare): a worker that scores spans only
    never imports sympy (~1.2 CPU-s); a scorer without a `prepare` gets WARM_MODULES before its first call."""
    module = tmp_path / "probe.py"
    module.write_text(
        "import sys\n"
        "from fspo.training.outcome import prepare\n"
        "def imported(**kwargs):\n"
        "    return 'math_verify' in sys.modules\n"
        "def prepared(**kwargs):\n"
        "    return 'math_verify' in sys.modules\n"
        "prepared.prepare = prepare\n"
    )
    seen = {}
    for name in ("prepared", "imported"):
        limited = TimeLimitedScorer(functools.partial(custom_scorer, str(module), name), timeout_s=5)
        try:
            seen[name] = [limited(data_source=source) for source in ("hotpotqa", "HotpotQA", "math500")]
        finally:
            limited.close()
    assert seen == {"prepared": [False, False, True], "imported": [True, True, True]}
