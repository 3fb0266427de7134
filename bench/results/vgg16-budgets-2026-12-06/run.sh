cd /tmp/bv
while ! grep -q "^rc=" /tmp/ci68.log; do sleep 10; done
sleep 20
set -x
M=/work/main
date -u
$M/.venv/bin/python code/bench/seeds.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --trials 4 --seeds 1,2,3 --variant "default4=--trials 4" --out searches
date -u
$M/.venv/bin/python code/bench/best_known.py --model-repository $M/examples/vgg16/model_repository \
  --model vgg16 --input-data $M/examples/vgg16/inputs.json --slo 1000ms \
  --grid-top 0 --rounds 3 --studies searches --results six-seed2.results.json --out finals
date -u
