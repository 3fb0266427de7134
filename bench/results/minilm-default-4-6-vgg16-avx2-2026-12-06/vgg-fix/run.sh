cd /tmp/bv
set -x
M=/work/main
P=$M/.venv/bin/python
export PYTHONPATH=/tmp/bv/code
date -u
$P code/bench/seeds.py --model-repository $M/examples/vgg16/model_repository --model vgg16 \
  --input-data $M/examples/vgg16/inputs.json --slo 1000ms --trials 8 --seeds 3 \
  --variant "predict8fix=--strategy predict --trials 8" --out searches
date -u
cp /tmp/bm/vgg-searches/predict8-seed3.db searches/
$P code/bench/best_known.py --model-repository $M/examples/vgg16/model_repository --model vgg16 \
  --input-data $M/examples/vgg16/inputs.json --slo 1000ms --grid-top 0 --rounds 3 --studies searches \
  --out finals
date -u
