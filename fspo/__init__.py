"""FSPO: Factuality-aware Step-wise Policy Optimization on verl.

The algorithm is a chain of small pure functions (text -> steps -> token labels -> shaped
advantages) in :mod:`fspo.steps`, :mod:`fspo.token_labels` and :mod:`fspo.advantage`; the verl glue
(reward manager, trainer, task runner) lives in :mod:`fspo.reward`, :mod:`fspo.trainer` and
:mod:`fspo.main`; :mod:`fspo.cpu` lets verl's real trainer run on a machine without a GPU.
"""

__version__ = "0.1.0"
