#!/bin/bash
# One device call: the CUDA tests, then chapters' full-mode code paths with every training loop cut to 5 steps
# (benchmarks/dry_run.py). Here, first: `python benchmarks/device/make_cells.py` and the beartype wheel in .gpu/whl
# (the device image has torch, numpy, matplotlib, tqdm, jaxtyping, pytest, but not beartype); then
#   run(command='CHAPTERS="02:30 04:120" bash benchmarks/device/go.sh', carry=[".gpu"])
# CHAPTERS lists notebook prefix:seconds pairs, each chapter stopped at its seconds. myst_nb, IPython.display
# and jupytext are stand-ins (shims/): glue prints each scalar as a `GLUE name = value` line.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/benchmarks/device/shims PYTHONUNBUFFERED=1 TQDM_DISABLE=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, jaxtyping, beartype; print(torch.__version__, jaxtyping.__version__, beartype.__version__)"
start=$(date +%s)
# test_colab needs nbformat, which the device lacks
timeout 45 python3 -m pytest tests/ --confcutdir=tests -p no:cacheprovider -q -k "cuda or bf16" \
  --ignore=tests/test_colab.py > "$OUT/cuda_tests.log" 2>&1
echo "cuda tests rc=$? $(( $(date +%s) - start )) s"; tail -4 "$OUT/cuda_tests.log"
for pair in $CHAPTERS; do
  nb=${pair%:*} s=$(date +%s)
  timeout "${pair#*:}" python3 benchmarks/dry_run.py --steps 5 notebooks/"$nb"_*.md > "$OUT/dry_$nb.log" 2>&1
  echo "== $nb rc=$? $(( $(date +%s) - s )) s"
  grep -E "cell +[0-9]+ " "$OUT/dry_$nb.log" | grep -v " ok " | cut -c1-230
  tail -1 "$OUT/dry_$nb.log" | cut -c1-200
done
