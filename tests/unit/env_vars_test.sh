#!/usr/bin/env bash
# The ZT_* environment variables have one list: the table in src/core/env_vars.cpp. Fails when
#   - src/ calls getenv with a "ZT_..." name anywhere but the table's file (read them with
#     env_value(EnvVar::...), core/env_vars.h);
#   - src/ names a variable ("ZT_NAME" as a whole string literal: a lookup, an export, a
#     label) that the table lacks;
#   - a table entry is missing from the documentation's table (docs/launching.md,
#     "Environment variables": one row per variable, | `ZT_NAME` | ...);
#   - a ZT_TEST_* entry is not test-only or not read by the fault injector
#     (core/fail_point.cpp), the one home of test hooks.
# Usage: env_vars_test.sh [SRC_DIR [DOC]]   (default: the src/ and docs/launching.md next to tests/)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src=${1:-"$root/src"}
src=${src%/}
doc=${2:-"$root/docs/launching.md"}
table="$src/core/env_vars.cpp"
[[ -f $table ]] || { echo "env_vars: no table at $table" >&2; exit 2; }
[[ -f $doc ]] || { echo "env_vars: no documentation at $doc" >&2; exit 2; }

# The table's names: the "ZT_..." literal of each {EnvVar::X, "ZT_..." entry.
mapfile -t names < <(grep -oE '\{EnvVar::[A-Za-z0-9]+, "ZT_[A-Z0-9_]+"' "$table" | grep -oE 'ZT_[A-Z0-9_]+' | sort -u)
(( ${#names[@]} > 0 )) || { echo "env_vars: found no entries in $table" >&2; exit 2; }
declare -A known
for n in "${names[@]}"; do known[$n]=1; done

failures=()

# 1. Bare reads outside the table.
while IFS= read -r hit; do
  [[ -z $hit ]] && continue
  failures+=("$hit: reads a ZT_ variable with getenv; use env_value(EnvVar::...) from core/env_vars.h")
done < <(grep -rnE 'getenv\(\s*"ZT_' "$src" --include='*.cpp' --include='*.h' --include='*.cu' --include='*.cuh' |
         grep -v "^$table:" | grep -vE '^[^:]+:[0-9]+:\s*//' || true)

# 2. Names used in src/ that the table lacks.
while IFS= read -r hit; do
  [[ -z $hit ]] && continue
  file_line=${hit%%:\"*}
  name=$(grep -oE '"ZT_[A-Z0-9_]+"' <<<"${hit#"$file_line"}" | head -1 | tr -d '"')
  [[ -n ${known[$name]+x} ]] && continue
  failures+=("$file_line: names $name, which is not in the table (src/core/env_vars.cpp)")
done < <(grep -rnoE '"ZT_[A-Z0-9_]+"' "$src" --include='*.cpp' --include='*.h' --include='*.cu' --include='*.cuh' || true)

# 3. Every table entry documented.
for n in "${names[@]}"; do
  grep -qE "^\| \`$n\` \|" "$doc" || failures+=("$doc: no row for $n (| \`$n\` | ... |)")
done

# 4. Test hooks live in the fault injector.
while IFS= read -r entry; do
  [[ $entry =~ A::Test,\ \"core/fail_point\.cpp ]] && continue
  failures+=("$table: $(grep -oE 'ZT_TEST_[A-Z0-9_]+' <<<"$entry"): test-only variables are A::Test and read by core/fail_point.cpp")
done < <(grep -E '\{EnvVar::[A-Za-z0-9]+, "ZT_TEST_' "$table")

if (( ${#failures[@]} > 0 )); then
  printf 'env_vars: %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "env_vars: ${#names[@]} variables, read only through the table and all documented"
