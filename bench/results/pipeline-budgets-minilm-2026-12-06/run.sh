set -x
cd /tmp/bp
M=/work/main
date -u
$M/.venv/bin/python code/bench/seeds.py --model-repository $M/examples/minilm_pipeline/model_repository \
  --model text_encoder --input-data $M/examples/minilm_pipeline/inputs.json --slo 100ms \
  --trials 4 --seeds 1,2,3 --variant "default4=--trials 4" --variant "default8=--trials 8" \
  --variant "default12=--trials 12" --out searches
date -u
$M/.venv/bin/python code/bench/best_known.py --model-repository $M/examples/minilm_pipeline/model_repository \
  --model text_encoder --input-data $M/examples/minilm_pipeline/inputs.json --slo 100ms \
  --grid-top 0 --rounds 3 --studies searches --results eight-seed2.results.json six-seed2.results.json --out finals
date -u
