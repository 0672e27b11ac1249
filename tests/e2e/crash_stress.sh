#!/usr/bin/env bash
# Crash stress: N short CPU runs into one output_dir, each killed at a random moment
# (kill -9, or two SIGTERMs 10 ms apart as GNU timeout sends them), each followed by a
# run that resumes (--resume auto) to the end. Checkpoints are saved every step, so the
# kills land in every phase of a save. After each kill and each resume it asserts:
# `latest` names a complete checkpoint (its manifest and shards validate: `zerotrain
# consolidate` reads them with resume's validator), final/ (when present) is one whole
# model, and, after the resume, no temporary folder remains and the run finished.
#
# Then N exports through the directory swap (io/staging_dir.h): `prepare --out`,
# `consolidate CKPT OUT` and `lora merge BASE ADAPTER OUT`, each into a folder that holds
# the user's files (README.md, .git/, src/, a link) and, beside it, a user's folder named
# like a staging one (OUT.old-2024-01-15). Each is killed, alternately, at a random moment
# (kill -9) or at one of the swap's fail points (ZT_TEST_FAIL_AT, with and without
# renameat2's exchange), then run again to the end. After the kill OUT is the whole old or
# the whole new directory (or, between the two renames of the no-exchange path, missing
# with the old one aside); after the re-run it is whole, the user's files are all there
# with their content, the user's sibling folder too, and no staging folder is left.
#
#   tests/e2e/crash_stress.sh ZEROTRAIN WORKDIR          # 4 + 4 kills (CTest: e2e.crash_stress)
#   ZT_STRESS_LONG=1 tests/e2e/crash_stress.sh ...       # 100 + 100 kills
#   ZT_STRESS_ITERATIONS=N ZT_STRESS_SEED=S ...          # N + N kills, reproducible delays
#   ZT_STRESS_EXPORT_ITERATIONS=M ...                    # N + M kills
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
M="${ZT_STRESS_EXPORT_ITERATIONS:-$N}"
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

echo "crash stress (training): runs $runs, kills $kills, resumes $resumes, failures $failures"

# ---- exports through the directory swap ----

EXP="$WORK/exports"
mkdir -p "$EXP"
# The command writing each export; OUT is its target.
export_cmd() {
  case "$1" in
    prepare) echo "$ZT prepare --tokenizer bytes --no-eos --out $EXP/prep $ROOT/data/text/artistic.txt" ;;
    consolidate) echo "$ZT consolidate $OUT/checkpoints $EXP/hf --quiet" ;;
    merge) echo "$ZT lora merge $ROOT/tests/data/hf/gpt2 $ROOT/tests/data/peft/gpt2_c_attn $EXP/merged --quiet" ;;
  esac
}
export_dir() {
  case "$1" in
    prepare) echo "$EXP/prep" ;;
    consolidate) echo "$EXP/hf" ;;
    merge) echo "$EXP/merged" ;;
  esac
}
# What a whole export holds (besides the user's files).
export_files() {
  case "$1" in
    prepare) echo "dataset.json train_000000.bin" ;;
    *) echo "config.json generation_config.json model.safetensors" ;;
  esac
}
plant_user_files() {
  local d="$1"
  mkdir -p "$d/.git/objects/ab" "$d/src" "$d.old-2024-01-15"
  echo "the user's notes" >"$d/README.md"
  echo "[core]" >"$d/.git/config"
  echo "object" >"$d/.git/objects/ab/cdef"
  echo "int main() {}" >"$d/src/main.c"
  ln -sfn README.md "$d/LINK.md"
  echo "the user's backup" >"$d.old-2024-01-15/model.safetensors"
}
check_user_files() {
  local what="$1" d="$2"
  [[ "$(cat "$d/README.md" 2>/dev/null)" == "the user's notes" ]] || fail "$what" "$d/README.md lost or changed"
  [[ "$(cat "$d/.git/config" 2>/dev/null)" == "[core]" ]] || fail "$what" "$d/.git/config lost or changed"
  [[ "$(cat "$d/.git/objects/ab/cdef" 2>/dev/null)" == "object" ]] || fail "$what" "$d/.git/objects lost"
  [[ "$(cat "$d/src/main.c" 2>/dev/null)" == "int main() {}" ]] || fail "$what" "$d/src/main.c lost or changed"
  [[ "$(readlink "$d/LINK.md" 2>/dev/null)" == "README.md" ]] || fail "$what" "$d/LINK.md lost"
  [[ "$(cat "$d.old-2024-01-15/model.safetensors" 2>/dev/null)" == "the user's backup" ]] ||
    fail "$what" "the user's folder $d.old-2024-01-15 was touched"
}
check_whole() {
  local what="$1" kind="$2" d f
  d="$(export_dir "$kind")"
  for f in $(export_files "$kind"); do
    [[ -f "$d/$f" ]] || fail "$what" "$kind: $d lacks $f (not one whole directory)"
  done
}
check_no_staging() {
  local left
  left="$(find "$EXP" -maxdepth 1 -regextype posix-extended -regex '.*\.(tmp|old)-[0-9]+-[0-9]+' 2>/dev/null)"
  [[ -z "$left" ]] || fail "$1" "staging left: $left"
}

kinds=(prepare consolidate merge)
# The swap's fail points (docs/checkpoints.md, Atomicity); the last with the rename-aside
# path of filesystems without renameat2's exchange.
points=("staging.carried@README.md" "staging.carried@.git" "staging.carried@src" "staging.before_swap"
  "replace.swapped" "NOEXCHANGE:staging.before_swap" "NOEXCHANGE:replace.aside")
declare -A span
for kind in "${kinds[@]}"; do
  plant_user_files "$(export_dir "$kind")"
  t0=$(date +%s%N)
  $(export_cmd "$kind") >"$WORK/export_first_$kind.log" 2>&1 ||
    { echo "the first $kind failed: $(tail -5 "$WORK/export_first_$kind.log")" >&2; exit 1; }
  span[$kind]=$(( ($(date +%s%N) - t0) / 1000000 + 1 ))
  runs=$((runs + 1))
  check_whole "first $kind" "$kind"
  check_user_files "first $kind" "$(export_dir "$kind")"
  echo "a $kind takes ${span[$kind]} ms"
done
export_kills=0
for ((i = 1; i <= M; i++)); do
  kind="${kinds[$((RANDOM % 3))]}"
  dir="$(export_dir "$kind")"
  log="$WORK/export_kill_$i.log"
  if ((i % 2)); then
    point="${points[$((RANDOM % ${#points[@]}))]}"
    env_args=()
    if [[ "$point" == NOEXCHANGE:* ]]; then
      point="${point#NOEXCHANGE:}"
      env_args+=(ZT_TEST_NO_RENAME_EXCHANGE=1)
    fi
    how="fail point $point${env_args[*]:+ (no exchange)}"
    # In the background: no job notice for the kill the drill makes.
    env "${env_args[@]}" ZT_TEST_FAIL_AT="$point" $(export_cmd "$kind") >"$log" 2>&1 &
    wait $! 2>/dev/null
    rc=$?
    [[ $rc == 137 ]] || fail "$kind, $how" "exited $rc, not killed at the point: $(tail -3 "$log")"
  else
    delay_ms=$(( (RANDOM * 32768 + RANDOM) % span[$kind] ))
    how="kill -9 after ${delay_ms} ms"
    $(export_cmd "$kind") >"$log" 2>&1 &
    pid=$!
    sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$?
    [[ $rc == 0 || $rc == 137 ]] || fail "$kind, $how" "exited $rc: $(tail -3 "$log")"
  fi
  runs=$((runs + 1))
  kills=$((kills + 1))
  export_kills=$((export_kills + 1))
  if [[ -e "$dir" ]]; then
    check_whole "$kind after $how" "$kind"
    check_user_files "$kind after $how" "$dir"
  elif [[ "$how" != *replace.aside* ]]; then
    fail "$kind after $how" "$dir is missing"
  fi
  $(export_cmd "$kind") >"$WORK/export_again_$i.log" 2>&1
  rc=$?
  runs=$((runs + 1))
  [[ $rc == 0 ]] || fail "$kind re-run" "exited $rc: $(tail -5 "$WORK/export_again_$i.log")"
  check_whole "$kind re-run" "$kind"
  check_user_files "$kind re-run" "$dir"
  check_no_staging "$kind re-run"
  echo "export $i: $kind, $how, re-run whole"
done

echo "crash stress: runs $runs, kills $kills (exports $export_kills), resumes $resumes, failures $failures"
[[ $failures == 0 ]]
