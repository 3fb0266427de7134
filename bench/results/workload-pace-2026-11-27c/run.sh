#!/bin/bash
# issue 41: MiniLM --trials 6 at seeds 2, 3 (winner vs FP32-only reference, 3 interleaved rounds), then the MLP's shipped search (no seed) 3 times, timed
cd /work/bench-wt
export PYTHONPATH=/work/bench-wt
REF=/work/main/bench/results/workload-precision-minilm-2026-11-27/bench.db
for seed in 2 3; do
  echo "== minilm seed $seed $(date -u +%FT%TZ)"
  .venv/bin/python bench/workload_pace.py --seed $seed --reference-db $REF --out /work/bench-out/minilm-seed$seed > /work/bench-out/minilm-seed$seed.log 2>&1
  echo "rc=$?"
done
for i in 2 3 4; do
  echo "== mlp seed $i $(date -u +%FT%TZ)"
  .venv/bin/python bench/workload_pace.py --model-repository examples/model_repository --model mlp --workload examples/workloads/interactive-batch.yaml --trials 12 --seed $i --study mlp-workload-interactive-batch --reference-results /work/main/bench/results/workload-pace-2026-11-27/mlp-old.results.json --rounds 0 --out /work/bench-out/mlp-seed$i > /work/bench-out/mlp-seed$i.log 2>&1
  echo "rc=$?"
done
echo "== done $(date -u +%FT%TZ)"
