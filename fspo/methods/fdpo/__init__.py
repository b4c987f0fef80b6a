"""F-DPO (Chaduvula et al., "Reducing Hallucinations in LLMs via Factuality-Aware Preference Learning",
arXiv 2601.03027) on this project's step verifier: ``fspo fdpo build-pairs`` (pairs.py) and ``fspo fdpo train``
(trainer.py, TRL's DPOTrainer with F-DPO's margin); :mod:`fspo.cli.fdpo` parses both."""
