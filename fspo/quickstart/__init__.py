"""``fspo quickstart``: a short real FSPO run on the CPU with SmolLM2-135M, judged before and after.

Not part of a training job: :mod:`fspo.quickstart.cli` builds synthetic data, converts the packaged
SmolLM2 (:mod:`fspo.quickstart.smollm2`), trains through ``python -m fspo.training.main``
(:mod:`fspo.quickstart.launch`) and judges each reasoning step against the synthetic world it asked
about (:mod:`fspo.data.world_judge`, :mod:`fspo.quickstart.step_report`).
"""
