"""The training loop flushes subnormal floats (slow on x86 CPUs) to zero while it runs and restores the mode after."""

import pytest
import torch

from neuralgp.train.loop import denormals_flushed


def _flushing() -> bool:
    return torch.tensor(1e-40, dtype=torch.float32).item() == 0.0


@pytest.mark.parametrize("before", [False, True])
def test_subnormals_are_flushed_inside_and_the_mode_restored_after(before):
    if not torch.set_flush_denormal(before):
        pytest.skip("this CPU cannot flush subnormals")
    try:
        with denormals_flushed():
            assert _flushing()
        assert _flushing() == before
        with pytest.raises(KeyError), denormals_flushed():
            raise KeyError
        assert _flushing() == before
    finally:
        torch.set_flush_denormal(False)
