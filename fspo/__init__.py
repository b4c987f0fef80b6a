"""FSPO: Factuality-aware Step-wise Policy Optimization on verl.

The method is a chain of small pure functions at the package root (text -> steps -> token labels -> shaped
advantages): :mod:`fspo.steps`, :mod:`fspo.token_labels`, :mod:`fspo.advantage`, with :mod:`fspo.evidence`.
The packages around it, by role:

- ``training``: the verl job (entry point, trainer hook, reward manager); ``verifiers``: the step verifiers;
  ``config``: the ``fspo:`` block; ``launch``: the checks before Ray starts; ``cpu``: verl on a machine
  without a GPU;
- ``methods``: the comparison modes (KnowRL, FAPO, F-DPO) on the same verifiers and data;
- ``utils``: file and network utilities;
- ``cli``, ``data``, ``evaluation``, ``verifier_tools``, ``quickstart``: the tools around the job.
"""

__version__ = "0.1.0"
