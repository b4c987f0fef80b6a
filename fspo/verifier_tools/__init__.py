"""Tools around the step verifiers, outside a training job: ``fspo verify`` (:mod:`fspo.verifier_tools.verify`),
``fspo verifier train`` / ``download`` (:mod:`fspo.verifier_tools.finetune`, :mod:`fspo.verifier_tools.download`),
labelled claim sets (:mod:`fspo.verifier_tools.labelled`) and calibration (:mod:`fspo.verifier_tools.quality`).

The backends a training job runs are in :mod:`fspo.verifiers`.
"""
