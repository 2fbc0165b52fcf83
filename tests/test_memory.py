"""Large Monte Carlo evaluations run in bounded memory: a million prompts cost a chunk's worth, not a million's."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, torch
    from icl_utils import exact, risk
    from icl_utils.estimators import averaging
    from icl_utils.tasks import LinearRegression

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    task = LinearRegression(dim=5, noise_std=0.5)
    risk.query_risk(averaging, task, 10, 2048, gen)  # warm up: allocator and kernels
    exact.bayes_risk(task, 64, gen, n_mc=1024, chunk_size=512)  # at the chunk size measured below
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mean, se = {call}
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({{"mb": (after - before) / 1024, "mean": mean, "se": se}}))
    """
)


def peak_growth(call: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(call=call)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "call, unchunked_mb",
    [
        # 10^6 prompts of 11 points in R^5: the inputs alone are 220 MB in float32.
        ("risk.query_risk(averaging, task, 10, 1_000_000, gen, chunk_size=8192)", 220),
        # 20,000 draws of a 64 x 64 float64 kernel: 655 MB at once.
        ("exact.bayes_risk(task, 64, gen, n_mc=20_000, chunk_size=512)", 655),
    ],
)
def test_million_prompt_risks_stay_within_a_memory_bound(call, unchunked_mb):
    """Peak resident memory grows by less than 64 MB (a tenth or less of the unchunked need)."""
    result = peak_growth(call)
    assert result["mb"] < 64, f"{call}: peak memory grew by {result['mb']:.0f} MB (unchunked: {unchunked_mb} MB)"
    assert result["se"] > 0 and result["mean"] > 0


def test_long_prompts_in_100_dimensions_are_chunked_by_values():
    """At the default chunking, 2048 prompts of 1001 points in R^100: chunks of a fixed 4096 prompts would hold them
    all, 0.83 GB of inputs in float32 (and 1.6 GB more for the context as float64 in the estimator); chunks of
    CHUNK_ELEMENTS values hold 67 MB. The bound, 512 MiB, is 0.65 of the fixed chunks' inputs alone."""
    result = peak_growth("risk.query_risk(averaging, LinearRegression(dim=100), 1000, 2048, gen)")
    print(f"peak growth {result['mb']:.0f} MB")
    assert result["mb"] < 512, result


def test_query_risk_draws_a_bounded_number_of_values_at_a_time(monkeypatch):
    """Every chunk holds at most CHUNK_ELEMENTS values, prompts x (n + 1) x (d + 1), whatever n and d; the risk
    does not depend on the chunking beyond Monte Carlo error."""
    import torch

    from icl_utils import config, risk
    from icl_utils.estimators import averaging
    from icl_utils.tasks import LinearRegression

    sizes = []
    task = LinearRegression(dim=30, noise_std=0.5)
    original = type(task).sample
    monkeypatch.setattr(
        type(task), "sample", lambda self, b, n, g, **kw: (sizes.append(b), original(self, b, n, g, **kw))[1]
    )
    monkeypatch.setattr(config, "CHUNK_ELEMENTS", 20_000)
    small = risk.query_risk(averaging, task, 9, 3000, torch.Generator().manual_seed(0))
    assert max(sizes) * 10 * 31 <= 20_000 and sum(sizes) == 3000 and len(sizes) == 47
    sizes.clear()
    monkeypatch.setattr(config, "CHUNK_ELEMENTS", 2**24)
    whole = risk.query_risk(averaging, task, 9, 3000, torch.Generator().manual_seed(0))
    assert sizes == [3000]
    assert abs(small[0] - whole[0]) < 4 * (small[1] ** 2 + whole[1] ** 2) ** 0.5
