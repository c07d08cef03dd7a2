#!/usr/bin/env bash
# What EMA, checkpoint ensembles, a cross-model ensemble and the coverage penalty do to a trained run's BLEU,
# on its validation and test sets, decoded from the saved folders with `hf-s2s translate --reference` (the
# command users run; its scores are computed as results.json's). Prints one Markdown table row per setting.
#
#   scripts/decoding_study.sh RUN_DIR [OTHER_MODEL_DIR ...]
#   scripts/decoding_study.sh runs/transformer_multi30k runs/rnn_bahdanau_gru/model runs/rnn_luong_lstm/model
#
# RUN_DIR is a folder written by `hf-s2s train` (model/, checkpoint-*/, and ema/ when trained with --ema_decay).
# OTHER_MODEL_DIRs (same tokenizer) join RUN_DIR/model in one more ensemble. Environment: DATA (folder of
# <split>.<lang>[.gz] files, default ../shared/data/multi30k), SRC/TGT (de/en), VALID/TEST (split names: val,
# test_2016_flickr), BEAMS (5), CHECKPOINTS (last N in the ensemble: 3; 0: no such row), COVERAGE (beam search settings
# "LENGTH_PENALTY:BETA ..." with coverage penalty BETA, default "1.0:0.01 1.0:0.05 0.2:0 0.2:0.2": hf-s2s's beam
# score is log P / length ** LENGTH_PENALTY, so at 1.0 (the mean token log-probability) a beta means about 10x what
# it means in GNMT, whose length penalty hardly normalizes), PARTS (rows to print: "weights ensembles coverage").
set -euo pipefail

DATA=${DATA:-../shared/data/multi30k}
SRC=${SRC:-de}
TGT=${TGT:-en}
VALID=${VALID:-val}
TEST=${TEST:-test_2016_flickr}
BEAMS=${BEAMS:-5}
COVERAGE=${COVERAGE:-1.0:0.01 1.0:0.05 0.2:0 0.2:0.2}
PARTS=${PARTS:-weights ensembles coverage}
CHECKPOINTS=${CHECKPOINTS:-3}

usage="usage: $0 RUN_DIR [OTHER_MODEL_DIR ...]  (RUN_DIR: a training run's folder, with model/)"
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "$usage"
  sed -n '2,15s/^# \{0,1\}//p' "$0"  # the comment above: what it prints, the arguments and the environment
  exit 0
fi
if [ $# -lt 1 ] || [ ! -d "$1/model" ]; then
  echo "$usage" >&2
  exit 2
fi
run=${1%/}
shift
others=("$@")

corpus_file() {  # split lang -> path (plain or .gz)
  local path="$DATA/$1.$2"
  [ -f "$path" ] || path="$path.gz"
  [ -f "$path" ] || { echo "error: neither $DATA/$1.$2 nor $path exists (set DATA, VALID, TEST)" >&2; exit 2; }
  echo "$path"
}

bleu() {  # split, then translate's arguments -> the BLEU that translate --reference prints
  local split=$1 log
  shift
  log=$(mktemp)
  if ! hf-s2s translate "$@" --input "$(corpus_file "$split" "$SRC")" --reference "$(corpus_file "$split" "$TGT")" \
      2>"$log" >/dev/null; then
    tail -n 5 "$log" >&2
    rm -f "$log"
    exit 1
  fi
  grep '^BLEU ' "$log" | cut -d' ' -f2
  rm -f "$log"
}

row() {  # label, then translate's model folders and options: greedy and beam on both splits
  local label=$1 valid_greedy valid_beam test_greedy test_beam
  shift
  valid_greedy=$(bleu "$VALID" "$@" --beams 1)  # plain assignments, so that a failed decoding stops the script
  valid_beam=$(bleu "$VALID" "$@" --beams "$BEAMS")
  test_greedy=$(bleu "$TEST" "$@" --beams 1)
  test_beam=$(bleu "$TEST" "$@" --beams "$BEAMS")
  echo "| $label | $valid_greedy | $valid_beam | $test_greedy | $test_beam |"
}

raw_weights() {  # the raw weights of an EMA run: the checkpoint average when the run kept it, else the best checkpoint
  python - "$run" <<'EOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
results = json.loads((run / "results.json").read_text())
averaging = results.get("checkpoint_averaging") or {}
if averaging.get("used"):
    print(run / "averaged")
else:
    state = sorted(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))[-1]
    print(json.loads(state.read_text())["best_model_checkpoint"])
EOF
}

ema_used=$(python -c "import json, sys; print((json.load(open(sys.argv[1])).get('ema') or {}).get('used', False))" \
           "$run/results.json")
mapfile -t last < <(for checkpoint in "$run"/checkpoint-*; do  # the last CHECKPOINTS by step number
                       [ -d "$checkpoint" ] && echo "${checkpoint##*checkpoint-} $checkpoint"
                     done | sort -n | tail -n "$CHECKPOINTS" | cut -d' ' -f2-)

echo "| $run | validation greedy | validation beam $BEAMS | test greedy | test beam $BEAMS |"
echo "| --- | --- | --- | --- | --- |"
if [[ " $PARTS " == *" weights "* ]]; then
  row "model/ (the run's choice)" "$run/model"
  if [ "$ema_used" = "True" ]; then
    raw=$(raw_weights)
    row "raw weights ($(basename "$raw"))" "$raw"
  fi
  if [ -d "$run/ema" ]; then
    row "EMA (ema/)" "$run/ema"
  fi
fi
if [[ " $PARTS " == *" ensembles "* ]]; then
  if [ "$CHECKPOINTS" -gt 0 ]; then
    row "ensemble of the last ${#last[@]} checkpoints ($(for c in "${last[@]}"; do basename "$c"; done | paste -sd, -))" \
        "${last[@]}"
  fi
  if [ ${#others[@]} -gt 0 ]; then
    row "ensemble: model/ + ${others[*]}" "$run/model" "${others[@]}"
  fi
fi
if [[ " $PARTS " == *" coverage "* ]]; then
  for setting in $COVERAGE; do
    penalty=${setting%%:*}
    beta=${setting##*:}
    flags=(--beams "$BEAMS" --length-penalty "$penalty" --coverage-penalty "$beta")
    valid_beam=$(bleu "$VALID" "$run/model" "${flags[@]}")
    test_beam=$(bleu "$TEST" "$run/model" "${flags[@]}")
    echo "| model/, length penalty $penalty, coverage penalty $beta | - | $valid_beam | - | $test_beam |"
  done
fi
