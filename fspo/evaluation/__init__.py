"""Evaluate model directories on prepared benchmarks (verl-format parquet) and report the results.

```python
from fspo.data.io import read_rows
from fspo.evaluation import evaluate_model, write_results

metrics = evaluate_model("checkpoints/merged", read_rows("data/gsm8k.parquet"), max_new_tokens=1024)
write_results({"merged": {"gsm8k": metrics}}, "eval_out")
```
"""

from fspo.evaluation.answer_judge import AnswerJudge
from fspo.evaluation.generation import GenerationSettings, build_generator, render_prompts
from fspo.evaluation.pipeline import (
    evaluate_benchmark,
    evaluate_model,
    score_records,
    supported_step_rate,
)
from fspo.evaluation.report import results_table, write_results

__all__ = [
    "AnswerJudge",
    "GenerationSettings",
    "build_generator",
    "evaluate_benchmark",
    "evaluate_model",
    "render_prompts",
    "results_table",
    "score_records",
    "supported_step_rate",
    "write_results",
]
