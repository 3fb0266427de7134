# A/B: the default search (12 trials, seed 1) with one core taken by another process during its
# first trials (step 1: the precisions), on the old code and on the new.
cd /tmp/b67
M=/work/main
mkdir -p hog
for label in old new; do
  src=/tmp/b67/code; [ $label = new ] && src=/tmp/b67/code-new
  db=/tmp/b67/hog/$label.db
  date -u +"$label start %H:%M:%S"
  PYTHONPATH=$src $M/.venv/bin/python -m tritontune search -r $M/examples/minilm/model_repository -m minilm \
    --slo-p99 100ms --trials 12 --seed 1 --storage sqlite:///$db --study $label \
    --results /tmp/b67/hog/$label.results.json --input-data $M/examples/minilm/inputs.json \
    > /tmp/b67/hog/$label.log 2>&1 &
  pid=$!
  $M/.venv/bin/python /tmp/b67/hog.py $db >> /tmp/b67/hog/$label.hog.txt
  wait $pid
  date -u +"$label done %H:%M:%S"
done
