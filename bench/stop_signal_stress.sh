#!/usr/bin/env bash
# SIGTERM pairs at random moments of short CPU runs (GNU timeout's pattern, issue 15): each
# run gets SIGTERM, then SIGTERM again 0-20 ms later, at a random point of its training or
# of a save. After each: the run exited 0, `latest` names a checkpoint with its manifest,
# no temp folder is left, and `--resume latest` finishes the run with a whole final/.
# A signal that lands before training starts (during setup, nothing to save yet) ends the
# process by the default action; those are counted apart.
#   bench/stop_signal_stress.sh [RUNS]      (default 20; ZT_BUILD_DIR picks the build, default build/cpu)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${ZT_BUILD_DIR:-$root/build/cpu}/zerotrain
runs=${1:-20}
[[ -x $bin ]] || { echo "stop_signal_stress.sh: $bin not found (build the zerotrain target)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/run.yaml" <<YAML
model: {preset: tiny-gpt2}
data:
  train: ['$root/data/text/artistic.txt', '$root/data/text/apache-2.0.txt']
  validation_fraction: 0.5
  seq_len: 32
per_device_train_batch_size: 4
gradient_accumulation_steps: 2
max_steps: 60
save_interval: 4
keep_last: 2
eval_interval: 0
steps_per_print: 1
seed: 7
YAML
signalled=0 early=0 resumes=0 failures=0
fail() { echo "run $1: FAIL: $2"; tail -5 "$3" | sed 's/^/    /'; failures=$((failures + 1)); }
for ((i = 1; i <= runs; i++)); do
  out=$work/run$i log=$work/log$i
  "$bin" train "$work/run.yaml" --output_dir "$out" --threads 1 >"$log" 2>&1 &
  pid=$!
  # Wait for training (or not: 1 run in 5 is signalled at once), then a random moment.
  if ((RANDOM % 5)); then
    for _ in $(seq 200); do grep -q '^step ' "$log" 2>/dev/null && break; sleep 0.01; done
  fi
  sleep "0.$(printf '%03d' $((RANDOM % 1000)))"
  kill -TERM $pid 2>/dev/null
  sleep "0.0$(printf '%02d' $((RANDOM % 20)))"
  kill -TERM $pid 2>/dev/null
  wait $pid
  rc=$?
  if ! grep -q '^step ' "$log" && ((rc == 143)); then early=$((early + 1)); continue; fi
  signalled=$((signalled + 1))
  ((rc == 0)) || { fail $i "exit $rc after a SIGTERM pair" "$log"; continue; }
  ckpt=$out/checkpoints
  if [[ -f $ckpt/latest ]]; then
    name=$(cat "$ckpt/latest")
    [[ -f $ckpt/$name/manifest.json ]] || { fail $i "latest names $name, which has no manifest" "$log"; continue; }
  elif ! grep -q 'wrote the final model' "$log"; then
    fail $i "no latest after the stop" "$log"
    continue
  fi
  if compgen -G "$ckpt/.*.tmp" >/dev/null || compgen -G "$ckpt/latest.tmp*" >/dev/null; then
    fail $i "temp files left: $(ls -a "$ckpt" | tr '\n' ' ')" "$log"
    continue
  fi
  "$bin" train "$work/run.yaml" --output_dir "$out" --threads 1 --resume latest >"$log.resume" 2>&1 ||
    { fail $i "--resume latest failed" "$log.resume"; continue; }
  resumes=$((resumes + 1))
  [[ -f $out/final/model.safetensors && -f $out/final/config.json ]] || fail $i "final/ is not whole" "$log.resume"
  rm -rf "$out"
done
echo "stop_signal_stress: runs $runs, SIGTERM pairs in training/saves $signalled, before training $early," \
  "resumes $resumes, failures $failures"
((failures == 0))
