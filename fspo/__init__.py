"""FSPO: Factuality-aware Step-wise Policy Optimization on verl.

The algorithm is a chain of small pure functions (text -> steps -> token labels -> shaped advantages)
in :mod:`fspo.steps`, :mod:`fspo.token_labels` and :mod:`fspo.advantage`. A training job runs the verl
glue around them: :mod:`fspo.main` (entry point), :mod:`fspo.config_checks` (before Ray),
:mod:`fspo.reward` (reward workers), :mod:`fspo.reward_extra_info` (what travels from them to the
trainer), :mod:`fspo.trainer` (the advantage hook) and :mod:`fspo.verifiers`; :mod:`fspo.cpu` lets
verl's real trainer run on a machine without a GPU. The packages ``cli``, ``data``, ``evaluation``,
``verifier_tools`` and ``quickstart`` are the tools around the job.
"""

__version__ = "0.1.0"
