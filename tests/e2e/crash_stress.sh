#!/usr/bin/env bash
# Crash stress: N short CPU runs into one output_dir, each killed at a random moment
# (kill -9, or two SIGTERMs 10 ms apart as GNU timeout sends them), each followed by a
# run that resumes (--resume auto) to the end. Checkpoints are saved every step, so the
# kills land in every phase of a save. After each kill and each resume it asserts:
# `latest` names a complete checkpoint (its manifest and shards validate: `zerotrain
# consolidate` reads them with resume's validator), final/ (when present) is one whole
# model, and, after the resume, no temporary folder remains and the run finished.
#
#   tests/e2e/crash_stress.sh ZEROTRAIN WORKDIR          # 4 kills (CTest: e2e.crash_stress)
#   ZT_STRESS_LONG=1 tests/e2e/crash_stress.sh ...       # 100 kills
#   ZT_STRESS_ITERATIONS=N ZT_STRESS_SEED=S ...          # N kills, reproducible delays
#
# Prints the counts at the end (runs, kills, resumes, failures); exits 1 on any failure.
set -u
set +m  # no job-control notices ("Killed") for the runs killed on purpose
ZT="${1:?usage: crash_stress.sh ZEROTRAIN WORKDIR}"
WORK="${2:?usage: crash_stress.sh ZEROTRAIN WORKDIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
N="${ZT_STRESS_ITERATIONS:-}"
if [[ -z "$N" ]]; then
  if [[ "${ZT_STRESS_LONG:-0}" == 1 ]]; then N=100; else N=4; fi
fi
RANDOM="${ZT_STRESS_SEED:-$$}"

rm -rf "$WORK"
mkdir -p "$WORK"
OUT="$WORK/run"
cat >"$WORK/run.yaml" <<YAML
model: {preset: tiny-gpt2}
data:
  train: ['$ROOT/data/text/artistic.txt']
  seq_len: 32
per_device_train_batch_size: 2
learning_rate: 1.0e-3
save_interval: 1
keep_last: 2
steps_per_print: 1
seed: 5
output_dir: '$OUT'
YAML

runs=0 kills=0 resumes=0 failures=0
fail() {
  echo "FAIL (iteration $i, $1): $2" >&2
  failures=$((failures + 1))
}

# latest names a checkpoint whose manifest and shards validate.
check_latest() {
  local what="$1" name
  [[ -f "$OUT/checkpoints/latest" ]] || return 0  # killed before the first save
  name="$(cat "$OUT/checkpoints/latest")"
  if ! "$ZT" consolidate "$OUT/checkpoints" "$WORK/check_hf" --quiet >"$WORK/check.log" 2>&1; then
    fail "$what" "latest names '$name', which does not validate: $(tail -3 "$WORK/check.log")"
  fi
  rm -rf "$WORK/check_hf"
}

check_final() {
  local what="$1" f
  [[ -e "$OUT/final" ]] || return 0
  for f in config.json generation_config.json model.safetensors tokenizer.json; do
    [[ -f "$OUT/final/$f" ]] || fail "$what" "final/ lacks $f"
  done
}

check_no_temporaries() {
  local left
  left="$(find "$OUT" "$OUT/checkpoints" -maxdepth 1 \( -name '*.tmp*' -o -name '*.old*' -o -name '*.del' \) 2>/dev/null)"
  [[ -z "$left" ]] || fail "$1" "temporaries left: $left"
}

# A first, uninterrupted run measures how long a run of STEP_BLOCK steps takes; each
# kill then lands at a uniformly random moment of such a run (start-up, steps, saves,
# final/).
STEP_BLOCK=40
i=0
t0=$(date +%s%N)
"$ZT" train "$WORK/run.yaml" --threads 1 --max_steps "$STEP_BLOCK" >"$WORK/first.log" 2>&1 ||
  { echo "the first run failed: $(tail -5 "$WORK/first.log")" >&2; exit 1; }
span_ms=$(( ($(date +%s%N) - t0) / 1000000 + 1 ))
runs=1
echo "a run of $STEP_BLOCK steps takes ${span_ms} ms; killing at random moments of it"
steps=$STEP_BLOCK
for ((i = 1; i <= N; i++)); do
  steps=$((steps + STEP_BLOCK))
  log="$WORK/kill_$i.log"
  "$ZT" train "$WORK/run.yaml" --threads 1 --resume auto --max_steps "$steps" >"$log" 2>&1 &
  pid=$!
  runs=$((runs + 1))
  delay_ms=$(( (RANDOM * 32768 + RANDOM) % span_ms ))
  sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))"
  if ((RANDOM % 2)); then
    how="kill -9"
    kill -9 "$pid" 2>/dev/null
  else
    how="SIGTERM x2"
    kill -TERM "$pid" 2>/dev/null
    sleep 0.01
    kill -TERM "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  rc=$?
  done_steps=$(grep -c '^step ' "$log")
  kills=$((kills + 1))
  # A SIGTERMed run saves and exits 0; killed: 137/143; a finished one 0. Exit 1/2: a bug.
  if [[ $rc != 0 && $rc != 137 && $rc != 143 ]]; then fail "$how" "run exited $rc: $(tail -3 "$log")"; fi
  check_latest "after $how"
  check_final "after $how"

  "$ZT" train "$WORK/run.yaml" --threads 1 --resume auto --max_steps "$steps" >"$WORK/resume_$i.log" 2>&1
  rc=$?
  runs=$((runs + 1))
  resumes=$((resumes + 1))
  [[ $rc == 0 ]] || fail "resume" "exited $rc: $(tail -5 "$WORK/resume_$i.log")"
  [[ "$(cat "$OUT/checkpoints/latest" 2>/dev/null)" == "global_step$steps" ]] ||
    fail "resume" "latest is '$(cat "$OUT/checkpoints/latest" 2>/dev/null)', expected global_step$steps"
  check_latest "after resume"
  check_final "after resume"
  [[ -f "$OUT/final/model.safetensors" ]] || fail "resume" "no final/ after a finished run"
  check_no_temporaries "after resume"
  echo "iteration $i: $how after ${delay_ms} ms ($done_steps steps done), resumed to step $steps"
done

echo "crash stress: runs $runs, kills $kills, resumes $resumes, failures $failures"
[[ $failures == 0 ]]
