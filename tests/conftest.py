import pytest
import torch


@pytest.fixture
def gen():
    """A seeded CPU generator: unit tests run on the CPU wherever they are."""
    g = torch.Generator(device="cpu")
    g.manual_seed(1234)
    return g
