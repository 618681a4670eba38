#!/usr/bin/env bash
# The whole t2tcli pipeline on the public-domain data shipped in problems/data:
# question pairs (duplicate detection + paraphrase, as one mixture) and English -> Spanish
# Bible verses. Every step is a command you would type; copy it and change the variables.
#
#   OUT=my_demo TRAIN_STEPS=2000 examples/demo.sh
#
# The defaults take about 10-15 minutes on 2 CPU cores, so the models are small and
# briefly trained: the numbers show the pipeline working, not the best these tasks allow.
set -euo pipefail

OUT=${OUT:-demo_out}
DATA=$OUT/data
TRAIN_STEPS=${TRAIN_STEPS:-400}
# A model between mtf_transformer_tiny and _small; sequences long enough for the verses
# (datagen's meta.json lists token-length percentiles), several examples packed per row.
HPARAMS=${HPARAMS:-"d_model=128,d_ff=512,num_heads=4,d_kv=32,inputs_length=96,targets_length=64,batch_size=48,learning_rate=0.01,warmup_steps=100"}
mkdir -p "$OUT"
: > "$OUT/seconds.txt"

step() {  # step NAME COMMAND...: runs the command, remembers how long it took
  local name=$1 start=$SECONDS
  shift
  echo
  echo "== $name: $*"
  "$@"
  echo "$name $((SECONDS - start))" >> "$OUT/seconds.txt"
}

# 1. Raw CSVs -> shards + SentencePiece vocabularies + meta files.
step datagen_qp t2t-datagen --problem=qp_all --data_dir="$DATA"
step datagen_translate t2t-datagen --problem=translate_en_es --data_dir="$DATA"

# 2. Train one model on the question-pair mixture and one on translation.
step train_qp t2t-train --problem=qp_all --hparams_set=mtf_transformer_tiny --hparams="$HPARAMS" \
  --data_dir="$DATA" --model_dir="$OUT/qp_all" --train_steps="$TRAIN_STEPS" \
  --save_checkpoints_steps="$TRAIN_STEPS" --log_every_steps=100
step train_translate t2t-train --problem=translate_en_es --hparams_set=mtf_transformer_tiny --hparams="$HPARAMS" \
  --data_dir="$DATA" --model_dir="$OUT/translate" --train_steps="$TRAIN_STEPS" \
  --save_checkpoints_steps="$TRAIN_STEPS" --log_every_steps=100

# 3. Evaluate on (part of) the dev splits: accuracy / F1, BLEU, loss, perplexity.
step eval_qp t2t-eval --model_dir="$OUT/qp_all" --split=dev --max_examples=400
step eval_translate t2t-eval --model_dir="$OUT/translate" --split=dev --max_examples=200

# 4. Decode text files, as a user would.
printf '%s\t%s\n' \
  "And God said, Let there be light: and there was light." \
  "God said, \"Let there be light,\" and there was light." \
  "In the beginning God created the heaven and the earth." \
  "Jesus wept." > "$OUT/question_pairs.tsv"
step decode_qp t2t-decode --model_dir="$OUT/qp_all" --problem=qp_is_duplicate \
  --decode_from_file="$OUT/question_pairs.tsv" --decode_to_file="$OUT/is_duplicate.txt"
printf '%s\n' "And God saw the light, that it was good." "" "The LORD is my shepherd; I shall not want." \
  > "$OUT/english.txt"
step decode_translate t2t-decode --model_dir="$OUT/translate" \
  --decode_from_file="$OUT/english.txt" --decode_to_file="$OUT/spanish.txt" --decode_hparams=beam_size=4

echo
echo "== decoded"
paste "$OUT/question_pairs.tsv" "$OUT/is_duplicate.txt" | sed 's/^/  is duplicate? /'
paste -d '|' "$OUT/english.txt" "$OUT/spanish.txt" | sed 's/|/  ->  /; s/^/  /'

# 5. What was measured.
python - "$OUT" <<'PY'
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
seconds = dict(line.split() for line in (out / "seconds.txt").read_text().splitlines())
print("\n== summary")
print(f"{'model':<12}{'problem':<28}{'step':>6}  metrics")
for model in ("qp_all", "translate"):
    records = [json.loads(line) for line in (out / model / "eval_dev" / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        metrics = "  ".join(f"{k}={v:.3g}" for k, v in sorted(record["metrics"].items()))
        print(f"{model:<12}{record['problem']:<28}{record['step']:>6}  {metrics}")
print("\nseconds: " + ", ".join(f"{k}={v}" for k, v in seconds.items()))
PY
