"""``steps_per_epoch`` counts the optimiser steps ``minibatch_epoch`` takes, which fixed-budget refits rely on."""

import pytest
import torch

from neuralgp.train import minibatch_epoch, steps_per_epoch


@pytest.mark.parametrize("n, batch_size, min_batch", [(10, 4, 1), (10, 4, 2), (9, 4, 2), (9, 4, 1), (8, 4, 2),
                                                       (3, 8, 2), (1, 8, 1), (513, 512, 2), (1025, 512, 2)])
def test_steps_per_epoch_counts_the_steps_minibatch_epoch_takes(n, batch_size, min_batch):
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    steps = []
    opt.register_step_post_hook(lambda *_: steps.append(1))
    minibatch_epoch(lambda idx: (w * len(idx)).sum(), n, batch_size, torch.Generator().manual_seed(0), opt,
                    min_batch=min_batch)
    assert steps_per_epoch(n, batch_size, min_batch) == len(steps)
