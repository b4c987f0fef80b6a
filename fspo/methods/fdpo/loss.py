"""F-DPO's per-pair loss and its defaults, as its authors' code defines them (no torch: the CLI reads the defaults
before TRL loads).

VectorInstitute/Factual-Preference-Alignment, ``src/aixpert/training/training/factualdpo_trainer.py``: line 1347
subtracts ``(h_l - h_w) * Delta`` from DPO's logits (the log-ratio difference ``m`` of chosen over rejected) and
line 1367 takes ``-F.logsigmoid(self.beta * logits)``: the loss is ``-log sigmoid(beta * (m - lambda * dh))`` with
``dh = h_rejected - h_chosen``, the factuality margin inside beta. Their training config
(``src/aixpert/training/config/config.yaml``, ``factual_dpo``) sets beta = 0.1 and sweeps lambda (``deltas``) over
0, 2, 4, 6, 8, 10, 20, 30, 50, 100; their README's example trains lambda = 10, the default here.
"""

from __future__ import annotations

import math

FDPO_BETA = 0.1
FDPO_LAMBDA = 10.0
FDPO_LAMBDA_SWEEP = (0, 2, 4, 6, 8, 10, 20, 30, 50, 100)


def fdpo_loss(logratio_margin: float, beta: float, factuality_lambda: float, h_chosen: int, h_rejected: int) -> float:
    """``-log sigmoid(beta * (m - lambda * (h_rejected - h_chosen)))`` for one pair (module doc); plain DPO when the
    labels are equal or lambda is 0."""
    z = beta * (logratio_margin - factuality_lambda * (h_rejected - h_chosen))
    # -log sigmoid(z) = softplus(-z), written so that neither sign of z overflows.
    return max(-z, 0.0) + math.log1p(math.exp(-abs(z)))
