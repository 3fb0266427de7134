cd /tmp/bm
set -x
M=/work/main
P=$M/.venv/bin/python
export PYTHONPATH=/tmp/bm/code
date -u
$P code/bench/seeds.py --model-repository $M/examples/minilm/model_repository --model minilm \
  --input-data $M/examples/minilm/inputs.json --slo 100ms --trials 4 --seeds 1,2,3 \
  --variant "default4=--trials 4" --variant "default6=--trials 6" --out searches
date -u
$P code/bench/best_known.py --model-repository $M/examples/minilm/model_repository --model minilm \
  --input-data $M/examples/minilm/inputs.json --slo 100ms --grid-top 0 --rounds 3 --studies searches \
  --results predict12-seed2.results.json default12-seed1.results.json --out finals
date -u
$P code/bench/seeds.py --model-repository $M/examples/vgg16/model_repository --model vgg16 \
  --input-data $M/examples/vgg16/inputs.json --slo 1000ms --trials 8 --seeds 3 \
  --variant "predict8=--strategy predict --trials 8" --out vgg-searches
date -u
$P code/bench/best_known.py --model-repository $M/examples/vgg16/model_repository --model vgg16 \
  --input-data $M/examples/vgg16/inputs.json --slo 1000ms --grid-top 0 --rounds 3 --studies vgg-searches \
  --results vgg-predict12-seed1.results.json --out vgg-finals
date -u
