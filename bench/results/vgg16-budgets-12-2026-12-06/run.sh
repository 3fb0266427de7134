cd /tmp/bw
set -x
M=/work/main
date -u
$M/.venv/bin/python code/bench/seeds.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --trials 4 --seeds 1,2,3 --variant "predict4=--strategy predict --trials 4" --out searches
date -u
$M/.venv/bin/python code/bench/best_known.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --grid-top 0 --rounds 3 --studies searches --results six-seed2.results.json --out finals
date -u
cd /tmp/bw
set -x
M=/work/main
date -u
$M/.venv/bin/python code/bench/seeds.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --trials 4 --seeds 2,3 --variant "predict4=--strategy predict --trials 4" --out searches
date -u
$M/.venv/bin/python code/bench/seeds.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --trials 12 --seeds 1,2,3 --variant "default12=--trials 12" --variant "predict12=--strategy predict --trials 12" --out searches
date -u
$M/.venv/bin/python code/bench/best_known.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --grid-top 0 --rounds 3 --studies searches --results six-seed2.results.json --out finals
date -u
