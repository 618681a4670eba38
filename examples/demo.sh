#!/usr/bin/env bash
# The whole pipeline on shipped data, written as the commands a user types.
set -euo pipefail
OUT=${OUT:-demo_out}
mkdir -p "$OUT"

t2t-datagen --problem=copy_sequence --data_dir="$OUT/data"
