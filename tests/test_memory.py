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
    exact.bayes_risk(task, 64, gen, n_mc=256)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mean, se = {call}
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({{"mb": (after - before) / 1024, "mean": mean, "se": se}}))
    """
)


def peak_growth(call: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(call=call)], cwd=ROOT, capture_output=True, text=True,
                         check=True)
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
