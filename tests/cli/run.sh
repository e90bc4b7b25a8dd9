#!/usr/bin/env bash
# CLI tests: exit codes, stdout/stderr contents, and that bad input leaves a
# clear message naming the file. Usage: run.sh MTPQ TESTDATA ST_TOOL
set -u
MTPQ=$1 TESTDATA=$2 ST_TOOL=$3
MODEL=$TESTDATA/tiny-qwen3next/model
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
pass=0 fail=0

# run NAME WANT_EXIT CMD...  -> captures $SCRATCH/out, $SCRATCH/err
run() {
  local name=$1 want=$2
  shift 2
  "$@" >"$SCRATCH/out" 2>"$SCRATCH/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, want $want"; sed 's/^/  stderr: /' "$SCRATCH/err" | head -5
    fail=$((fail + 1)); return 1
  fi
  pass=$((pass + 1)); return 0
}
# has NAME FILE PATTERN  (grep -E)
has() {
  if grep -Eq -- "$3" "$SCRATCH/$2"; then pass=$((pass + 1))
  else echo "FAIL $1: $2 lacks /$3/"; sed 's/^/  | /' "$SCRATCH/$2" | head -8; fail=$((fail + 1)); fi
}
empty() {
  if [ ! -s "$SCRATCH/$2" ]; then pass=$((pass + 1))
  else echo "FAIL $1: $2 not empty"; fail=$((fail + 1)); fi
}

run help 0 "$MTPQ" --help && has help out '^Usage: mtpq COMMAND' && has help out 'inspect'
run help_cmd 0 "$MTPQ" help inspect && has help_cmd out '^Usage: mtpq inspect' && has help_cmd out -- '--json'
run inspect_h 0 "$MTPQ" inspect --help && has inspect_h out '^Usage: mtpq inspect'
run version 0 "$MTPQ" --version && has version out '^mtpq [0-9]+\.[0-9]+\.[0-9]+$'
run no_args 2 "$MTPQ" && has no_args err 'Usage'
run bad_cmd 2 "$MTPQ" frobnicate && has bad_cmd err "unknown command 'frobnicate'" && has bad_cmd err "mtpq --help"
run bad_opt 2 "$MTPQ" inspect --bogus "$MODEL" && has bad_opt err "unknown option '--bogus'" && has bad_opt err "mtpq help inspect"
run no_path 2 "$MTPQ" inspect && has no_path err 'exactly one PATH'
run two_paths 2 "$MTPQ" inspect a b
run flag_value 2 "$MTPQ" inspect --json=yes "$MODEL" && has flag_value err 'takes no value'
run help_unknown 2 "$MTPQ" help nothing
run missing 3 "$MTPQ" inspect "$SCRATCH/does-not-exist" && has missing err 'does-not-exist'
run exit_codes 0 "$MTPQ" help exit-codes && has exit_codes out '^4 +E_ST_OVERLAP'

# The shipped example.
run inspect_text 0 "$MTPQ" inspect "$MODEL"
has inspect_text out '311 tensors in 2 shards'
has inspect_text out '^family: +qwen3_next \(Qwen3NextForCausalLM\)'
has inspect_text out '^mtp: +1 layer, MoE with 16 experts \(per-expert\)'
has inspect_text out 'tied embeddings'
has inspect_text out '^mtp\.layers\.0\.mlp\.experts\.15\.up_proj\.weight +BF16 +\[64, 128\] +16384 +model-00002-of-00002\.safetensors'
has inspect_text out '^model\.embed_tokens\.weight +BF16 +\[151936, 128\] +38895616 +model-00001-of-00002\.safetensors'
run inspect_summary 0 "$MTPQ" inspect -s "$MODEL"
if grep -q 'up_proj.weight' "$SCRATCH/out"; then echo "FAIL inspect_summary: tensor table printed"; fail=$((fail + 1)); fi
run inspect_file 0 "$MTPQ" inspect "$MODEL/model-00001-of-00002.safetensors" && has inspect_file out '1 tensors in 1 shard'

run inspect_json 0 "$MTPQ" inspect --json "$MODEL"
if python3 - "$SCRATCH/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["tensors"]) == 311, len(d["tensors"])
assert {t["shard"] for t in d["tensors"]} == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
assert d["family"] == "qwen3_next", d["family"]
assert d["mtp"] == {"layers": 1, "experts": 16, "expert_layout": "per-expert", "tensors": 65, "bytes": d["mtp"]["bytes"]}, d["mtp"]
assert d["tied_embeddings"] is True
t = {x["name"]: x for x in d["tensors"]}["mtp.fc.weight"]
assert t["dtype"] == "BF16" and t["shape"] == [128, 256] and t["bytes"] == 65536, t
PY
then pass=$((pass + 1)); else echo "FAIL inspect_json: JSON contract"; fail=$((fail + 1)); fi

# Hostile input: exit 4 (format), message names the file and the tensor.
python3 - "$SCRATCH/short.safetensors" <<'PY'
import struct, sys
h = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}'
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(4))
PY
run hostile_size 4 "$MTPQ" inspect "$SCRATCH/short.safetensors"
has hostile_size err 'short\.safetensors'
has hostile_size err 'tensor w'
has hostile_size err 'E_ST_'
printf 'abc' >"$SCRATCH/tiny.safetensors"
run hostile_tiny 4 "$MTPQ" inspect "$SCRATCH/tiny.safetensors" && has hostile_tiny err 'shorter than the 8-byte header length'
mkdir -p "$SCRATCH/repo"
"$ST_TOOL" write "$SCRATCH/repo/a.safetensors" 1 >/dev/null
echo '{"weight_map": {"x": "../a.safetensors"}}' >"$SCRATCH/repo/model.safetensors.index.json"
run hostile_index 4 "$MTPQ" inspect "$SCRATCH/repo" && has hostile_index err 'not a file name in the same directory'
echo '{"hidden_size": 8}' >"$SCRATCH/repo/config.json"
rm "$SCRATCH/repo/model.safetensors.index.json"
run bad_config 4 "$MTPQ" inspect "$SCRATCH/repo" && has bad_config err 'config\.json: required field'

# verify-bitexact and bench-quant: usage errors and a tiny real run.
run verify_args 2 "$MTPQ" verify-bitexact "$MODEL" && has verify_args err 'two paths'
run verify_arith 2 "$MTPQ" verify-bitexact --requantize --arith gpu a b && has verify_arith err 'cuda or cpu'
run verify_norequant 2 "$MTPQ" verify-bitexact --arith cpu a b && has verify_norequant err 'need --requantize'
run verify_recipe 2 "$MTPQ" verify-bitexact --requantize --fp8-recipe fast a b
run verify_self 0 "$MTPQ" verify-bitexact "$MODEL" "$MODEL" && has verify_self out '^summary: 311 tensors, 311 identical, 0 differ'
run verify_noquant 4 "$MTPQ" verify-bitexact --requantize "$MODEL" "$MODEL" && has verify_noquant err 'no quantized tensors'
run verify_missing 9 "$MTPQ" verify-bitexact "$MODEL" "$MODEL/model-00002-of-00002.safetensors"
has verify_missing out '^MISSING +model\.embed_tokens\.weight'
run bench_small 0 "$MTPQ" bench-quant --rows 64 --cols 256 --iters 2 --no-gpu
has bench_small out '^nvfp4 +cpu +1 .* yes$'
has bench_small out '^fp8 +cpu +1 .* yes$'
run bench_bad 2 "$MTPQ" bench-quant --rows 0
run formats 0 "$MTPQ" help formats && has formats out '^nvfp4 ' && has formats out '^fp8-modelopt-export '

# build-vocab / tokenize: usage and input errors.
TOKJ=$MODEL/tokenizer.json
C=$TESTDATA/tiny-qwen3next/counts
run bv_noout 2 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv" && has bv_noout err 'required'
run bv_noinput 2 "$MTPQ" build-vocab -t "$TOKJ" --out "$SCRATCH/v" && has bv_noinput err 'at least one'
run bv_weight 2 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv:-1" --out "$SCRATCH/v"
run bv_small 2 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv" -n 100 --out "$SCRATCH/v" && has bv_small err 'forced set has 17958'
printf '5\t1\n999999\t3\n' >"$SCRATCH/big.tsv"
run bv_beyond 4 "$MTPQ" build-vocab -t "$TOKJ" -c "$SCRATCH/big.tsv" --out "$SCRATCH/v" && has bv_beyond err 'big\.tsv:2: token id 999999 is beyond'
printf '5\tmany\n' >"$SCRATCH/bad.tsv"
run bv_number 4 "$MTPQ" build-vocab -t "$TOKJ" -c "$SCRATCH/bad.tsv" --out "$SCRATCH/v" && has bv_number err 'bad\.tsv:1: expected'
printf 'not zstd at all' >"$SCRATCH/x.tsv.zst"
run bv_zstd 4 "$MTPQ" build-vocab -t "$TOKJ" -c "$SCRATCH/x.tsv.zst" --out "$SCRATCH/v" &&
  has bv_zstd err 'x\.tsv\.zst: corrupt or truncated \.zst'
# a real .zst cut short, and one with a bad block after a valid frame header, are worded the same (the block:
# a header of the reserved type 3; random bytes there were flaky: a random header is a raw block a quarter of
# the time, whose random contents decode, and the line parser reported them instead)
printf '5\t1\n6\t2\n' | zstd -q -c > "$SCRATCH/ok.tsv.zst" && head -c 12 "$SCRATCH/ok.tsv.zst" > "$SCRATCH/cut.tsv.zst"
run bv_zcut 4 "$MTPQ" build-vocab -t "$TOKJ" -c "$SCRATCH/cut.tsv.zst" --out "$SCRATCH/v" &&
  has bv_zcut err 'cut\.tsv\.zst: corrupt or truncated \.zst'
{ head -c 6 "$SCRATCH/ok.tsv.zst"; printf '\377\377\377'; head -c 64 /dev/zero; } > "$SCRATCH/junk.tsv.zst"
run bv_zjunk 4 "$MTPQ" build-vocab -t "$TOKJ" -c "$SCRATCH/junk.tsv.zst" --out "$SCRATCH/v" &&
  has bv_zjunk err 'junk\.tsv\.zst: corrupt or truncated \.zst'
# JSON nested past cJSON's limit is reported as such (not as "not valid JSON"), in tokenizer.json and config.json
python3 -c "print('{\"model\": ' + '[' * 200000 + ']' * 200000 + '}')" > "$SCRATCH/deep.json"
run bv_deep 4 "$MTPQ" build-vocab -t "$SCRATCH/deep.json" -c "$C/prose_train.tsv" --out "$SCRATCH/v" &&
  has bv_deep err 'deep\.json: JSON nests deeper than 1000 levels'
mkdir -p "$SCRATCH/deepcfg" && cp "$SCRATCH/deep.json" "$SCRATCH/deepcfg/config.json"
"$ST_TOOL" write "$SCRATCH/deepcfg/model.safetensors" 1 >/dev/null
run cfg_deep 4 "$MTPQ" inspect "$SCRATCH/deepcfg" && has cfg_deep err 'config\.json: JSON nests deeper than 1000 levels'
echo '{"model": {"type": "Unigram"}}' >"$SCRATCH/tok.json"
run bv_tok 4 "$MTPQ" build-vocab -t "$SCRATCH/tok.json" -c "$C/prose_train.tsv" --out "$SCRATCH/v" && has bv_tok err 'unsupported model type Unigram'
if ls "$SCRATCH"/v.* >/dev/null 2>&1; then echo "FAIL bv: outputs left behind"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
printf 'Hello world' >"$SCRATCH/h.txt"
run tok_ids 0 "$MTPQ" tokenize -t "$TOKJ" "$SCRATCH/h.txt" && has tok_ids out '^9707 1879$'
run bv_ok 0 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv" --text "$SCRATCH/h.txt" -n 20000 --out "$SCRATCH/ok"
has bv_ok out 'ok\.\{safetensors,pt,json\}: 20000 of 151669 ids'
# no silent wrong results, no silent overwrite: an existing PREFIX.* needs --force; an empty --out, JSONL with
# another field name, an empty text file are refused naming what is wrong; chat JSONL ("messages") is read
run bv_exists 10 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv" -n 20000 --out "$SCRATCH/ok" &&
  has bv_exists err 'ok.safetensors exists; pass --force'
run bv_force 0 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv" -n 20000 --out "$SCRATCH/ok" --force
run bv_emptyout 2 "$MTPQ" build-vocab -t "$TOKJ" -c "$C/prose_train.tsv" --out= && has bv_emptyout err 'out is empty'
printf '{"body": "hello world"}\n' > "$SCRATCH/body.jsonl"
run bv_field 4 "$MTPQ" build-vocab -t "$TOKJ" --text "$SCRATCH/body.jsonl" -n 20000 --out "$SCRATCH/b1" &&
  has bv_field err 'no line has a string field "text"' && has bv_field err 'the first line has "body"' &&
  [ ! -e "$SCRATCH/b1.safetensors" ]
printf '{"messages": [{"role": "user", "content": "hello world"}]}\n' > "$SCRATCH/chat.jsonl"
run bv_chat 0 "$MTPQ" build-vocab -t "$TOKJ" --text "$SCRATCH/chat.jsonl" -n 20000 --out "$SCRATCH/b2" &&
  has bv_chat out 'corpus: 2 tokens'
: > "$SCRATCH/void.txt"
run bv_void 4 "$MTPQ" build-vocab -t "$TOKJ" --text "$SCRATCH/void.txt" -n 20000 --out "$SCRATCH/b3" &&
  has bv_void err 'void.txt: no tokens'

# quantize --out: empty is a usage error; --force replaces only an earlier mtpq output or an empty directory,
# and an unrelated directory (a note and a subfolder) survives it untouched (exit 10)
Q="$MTPQ quantize $MODEL --vocab $SCRATCH/ok.safetensors --expert-input-scale 0.1667 -q"
run q_emptyout 2 $Q --out= && has q_emptyout err 'out is empty'
mkdir -p "$SCRATCH/mine/sub" && echo "my notes" > "$SCRATCH/mine/notes.txt"
run q_unrelated 10 $Q --out "$SCRATCH/mine" --force && has q_unrelated err 'not an earlier mtpq output'
[ "$(cat "$SCRATCH/mine/notes.txt")" = "my notes" ] && [ -d "$SCRATCH/mine/sub" ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL q_unrelated: the directory was touched"; }
echo x > "$SCRATCH/afile"
run q_file 10 $Q --out "$SCRATCH/afile" --force && has q_file err 'is a file'
mkdir -p "$SCRATCH/empty"
run q_empty 0 $Q --out "$SCRATCH/empty" --force
run q_again 10 $Q --out "$SCRATCH/empty" && has q_again err 'pass --force'
run q_replace 0 $Q --out "$SCRATCH/empty" --force
[ -f "$SCRATCH/empty/mtpq_manifest.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL q_replace"; }
# inspect recognises a drafter repo: the ids file is no shard, no "0 trunk layers", the quantization summarised
run i_drafter 0 "$MTPQ" inspect -s "$SCRATCH/empty" && has i_drafter out 'in 1 shard,' &&
  has i_drafter out 'mtpq drafter repo for qwen3_next' && has i_drafter out '48 NVFP4 modules, 9 FP8 modules'
# an ids file built with another tokenizer (a special token renamed) is refused by quantize (exit 4)
sed 's/<|im_start|>/<|im_begin|>/g' "$TOKJ" > "$SCRATCH/other-tok.json"
run bv_other 0 "$MTPQ" build-vocab -t "$SCRATCH/other-tok.json" -c "$C/prose_train.tsv" -n 20000 --out "$SCRATCH/oth"
run q_foreign 4 "$MTPQ" quantize "$MODEL" --vocab "$SCRATCH/oth.safetensors" --expert-input-scale 0.1667 \
  --out "$SCRATCH/qf" && has q_foreign err 'was built with another tokenizer' && [ ! -e "$SCRATCH/qf" ]

# the card's base_model: --base-model, else the Hub cache snapshot's repo (and its commit in the manifest);
# the target card's license carried over
SNAP="$SCRATCH/hub/models--acme--tiny-next/snapshots/0123456789abcdef0123456789abcdef01234567"
MABS=$(cd "$MODEL" && pwd)
mkdir -p "$SNAP" && for f in "$MABS"/*; do ln -s "$f" "$SNAP/"; done # (as the Hub cache links its blobs)
printf -- '---\nlicense: apache-2.0\nlicense_link: https://example.com/LICENSE\n---\n# tiny\n' > "$SCRATCH/README.md"
rm -f "$SNAP/README.md" && cp "$SCRATCH/README.md" "$SNAP/README.md"
run q_snap 0 "$MTPQ" quantize "$SNAP" --vocab "$SCRATCH/ok.safetensors" --expert-input-scale 0.1667 -q \
  --out "$SCRATCH/qs" && grep -q '^base_model: acme/tiny-next$' "$SCRATCH/qs/README.md" &&
  grep -q '^license: apache-2.0$' "$SCRATCH/qs/README.md" &&
  grep -q '^license_link: https://example.com/LICENSE$' "$SCRATCH/qs/README.md" &&
  grep -q '"revision":."0123456789abcdef0123456789abcdef01234567"' "$SCRATCH/qs/mtpq_manifest.json" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL q_snap card: $(head -8 "$SCRATCH/qs/README.md")"; }
run q_base 0 $Q --out "$SCRATCH/qb" --base-model org/other &&
  grep -q '^base_model: org/other$' "$SCRATCH/qb/README.md" && grep -q '^license_name: same-as-base-model$' \
  "$SCRATCH/qb/README.md" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL q_base card"; }

# the card's measured acceptance (--acceptance): a report of no known form and a throughput run are refused
# before the work (nothing written); a report that measured other weights after it (the old repo kept); the
# report that measured these weights (their sha256, as bench-acceptance records them) gives the table
stats() { printf '{"mean_acceptance_length": %s, "mal_ci95": [%s], "per_position": [0.7, 0.5, 0.3]%s}' "$@"; }
report() { # report FILE WEIGHTS_JSON [EXTRA_TOP_FIELD]
  local s0 s1
  s0=$(stats 2.5 "2.4, 2.6" "") s1=$(stats 2.45 "2.3, 2.6" ', "vs_stock": {"mal_diff": -0.05, "mal_diff_ci95": [-0.08, -0.01]}')
  printf '{"k": 3, "traces": "t.safetensors", "backend": "cpu"%s, "drafters": [{"kind": "stock", "domains": {"code": %s}, "all": %s}, {"kind": "drafter", "weights_sha256": %s, "domains": {"code": %s}, "all": %s}]}\n' \
    "${3:-}" "$s0" "$s0" "$2" "$s1" "$s1" > "$1"
}
digests() { # the .safetensors files of a repo, as {"name": "sha256"}
  (cd "$1" && sha256sum *.safetensors | awk 'BEGIN {printf "{"} {printf "%s\"%s\": \"%s\"", (NR > 1 ? ", " : ""), $2, $1} END {printf "}"}')
}
echo '{"drafters": 1}' > "$SCRATCH/notrep.json"
run q_acc_form 4 $Q --out "$SCRATCH/qa" --acceptance "$SCRATCH/notrep.json" &&
  has q_acc_form err 'notrep.json: not a bench-acceptance or bench-decode --json report' && [ ! -e "$SCRATCH/qa" ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL q_acc_form wrote $SCRATCH/qa"; }
report "$SCRATCH/pat.json" "$(digests "$SCRATCH/qb")" ', "accept_pattern": "p.json"'
run q_acc_pattern 4 $Q --out "$SCRATCH/qa" --acceptance "$SCRATCH/pat.json" && has q_acc_pattern err 'a throughput run'
report "$SCRATCH/oth.json" '{"model.safetensors": "00"}'
run q_acc_other 4 $Q --out "$SCRATCH/qb" --force --base-model org/other --acceptance "$SCRATCH/oth.json" &&
  has q_acc_other err 'no drafter in this report has the weights quantize wrote' &&
  ! grep -q 'Measured acceptance' "$SCRATCH/qb/README.md" && [ -f "$SCRATCH/qb/mtpq_manifest.json" ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL q_acc_other: the old repo changed"; }
report "$SCRATCH/mine.json" "$(digests "$SCRATCH/qb")"
run q_acc 0 $Q --out "$SCRATCH/qb" --force --base-model org/other --acceptance "$SCRATCH/mine.json" &&
  grep -q '^| code | 2.500 \[2.400, 2.600\] | 2.450 \[2.300, 2.600\] | -0.050 \[-0.080, -0.010\] |' "$SCRATCH/qb/README.md" &&
  grep -q '^| all | 2.500' "$SCRATCH/qb/README.md" && grep -q '^## Draft vocabulary' "$SCRATCH/qb/README.md" &&
  grep -q '^mtpq quantize .*--acceptance .*mine.json$' "$SCRATCH/qb/README.md" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL q_acc card: $(sed -n '/Measured/,/Provenance/p' "$SCRATCH/qb/README.md")"; }

# output paths whose directory is missing: refused before the work (exit 3), nothing written
run bv_nodir 3 "$MTPQ" build-vocab -t "$MODEL/tokenizer.json" -c "$C/prose_train.tsv" -n 20000 --out "$SCRATCH/no/dv" &&
  has bv_nodir err "no/dv: cannot write there \(its directory is missing"
printf 'hello world\n' > "$SCRATCH/p.txt"
run tr_nodir 3 "$MTPQ" traces --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -n 2 --out "$SCRATCH/no/t.st" &&
  has tr_nodir err "no/t.st: cannot write there" && [ ! -e "$SCRATCH/no" ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL tr_nodir: $SCRATCH/no exists"; }

# verify-bitexact --requantize takes the recipe from an mtpq reference's manifest: a repo made with --arith cpu
# and ModelOpt's qtensor FP8 recipe verifies without options; options that differ are said to
run q_cpu 0 $Q --out "$SCRATCH/qcpu" --arith cpu --fp8-recipe modelopt-qtensor
run verify_manifest 0 "$MTPQ" verify-bitexact --requantize "$MODEL" "$SCRATCH/qcpu" &&
  has verify_manifest out '^recipe: arith cpu, fp8 recipe modelopt-qtensor \(from .*qcpu/mtpq_manifest.json\)' &&
  has verify_manifest out '^summary: 57 tensors, 57 identical, 0 differ'
"$MTPQ" verify-bitexact --requantize --fp8-recipe f32 "$MODEL" "$SCRATCH/qcpu" >"$SCRATCH/out" 2>"$SCRATCH/err"
has verify_override err 'the options differ from the recipe .*qcpu/mtpq_manifest.json records \(arith cpu, fp8 recipe modelopt-qtensor\)'
has verify_override out 'recipe: arith cpu, fp8 recipe f32 \(from .*mtpq_manifest.json and the options given\)'
sed -i 's/"arith":.*"cpu"/"arith": "gpu"/' "$SCRATCH/qcpu/mtpq_manifest.json"
run verify_badman 4 "$MTPQ" verify-bitexact --requantize "$MODEL" "$SCRATCH/qcpu" &&
  has verify_badman err 'qcpu/mtpq_manifest.json: "arith" is gpu, not "cuda" or "cpu"'

# bench-acceptance: a traces file with no traces, and one without hidden states, are refused (exit 4)
"$ST_TOOL" write "$SCRATCH/notr.safetensors" 1 >/dev/null # (random tensors of every dtype, no NAME.tokens)
run acc_notraces 4 "$MTPQ" bench-acceptance --backend cpu --target "$MODEL" --traces "$SCRATCH/notr.safetensors" &&
  has acc_notraces err 'notr.safetensors: no traces' && empty acc_notraces out

# bench-target and bench-decode: usage errors, and a CPU run of each on a small hybrid target
HY=$TESTDATA/target/hybrid-next
run bt_none 2 "$MTPQ" bench-target --backend cpu && has bt_none err 'one of --target or --synthetic'
run bt_shape 2 "$MTPQ" bench-target --backend cpu --synthetic nope && has bt_shape err "no shape named 'nope'"
run bt_verify 2 "$MTPQ" bench-target --backend cpu --target "$HY" --verify 9 && has bt_verify err 'verify must be 2..8'
run bt_cpu 0 "$MTPQ" bench-target --backend cpu --target "$HY" --context 40 --verify 3 --prefill 20 --iters 2 --json &&
  has bt_cpu out '"tokens":	3' && has bt_cpu out '"prefill_tokens_per_s"'
run bs_tm 0 "$MTPQ" bench-step --backend cpu --target "$TESTDATA/target/hybrid-mtp" --target-model \
  "$TESTDATA/target/hybrid-mtp" --mal 2.5 --context 16 --iters 2 -k 2 &&
  has bs_tm out 'target verify step \(3 tokens, context 16' && has bs_tm out 'est. decode'
run bs_tm2 2 "$MTPQ" bench-step --backend cpu --target "$HY" --target-model "$HY" && has bs_tm2 err 'mal goes with'
run acc_plotdir 3 "$MTPQ" bench-acceptance --backend cpu --target "$MODEL" --traces "$TESTDATA/tiny-qwen3next/traces.safetensors" \
  --plot "$SCRATCH/nodir/p.svg" && has acc_plotdir err 'nodir/p.svg: cannot write there'
run bd_plotdir 3 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" \
  --plot "$SCRATCH/nodir/p.svg" && has bd_plotdir err 'cannot write there'
run bd_none 2 "$MTPQ" bench-decode --backend cpu --target "$HY" && has bd_none err '--prompts are required'
printf 'def f(x):\n    return x\n' > "$SCRATCH/p.txt"
run bd_k 2 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -k 0 && has bd_k err '-k must be'
run bd_batch9 2 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" --batch 9 &&
  has bd_batch9 err 'batch must be 1..8'
printf 'import os\n' > "$SCRATCH/p2.txt"
run bd_batchs 0 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" --prompts "$SCRATCH/p2.txt" \
  -k 2 -n 4 --batch 2 --temperature 0.7 && has bd_batchs out 'sampled .*batch 2, 2 prompts' &&
  has bd_batchs out '^stock .*[0-9]\.[0-9]{3} \[' && has bd_batchs out 'target% +draft% +accept% +other%'
run bd_batch 0 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" --prompts "$SCRATCH/p2.txt" \
  -k 2 -n 6 --batch 2 && has bd_batch out 'batch 2, 2 prompts' && has bd_batch out 'stock .* yes$'
# throughput runs: a greedy --json report is an acceptance pattern for a later run at the same k
run bd_pat 0 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -k 2 -n 8 --json &&
  has bd_pat out '"accepted_per_round"' && cp "$SCRATCH/out" "$SCRATCH/pat.json"
run bd_replay 0 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -k 2 -n 8 \
  --accept-pattern "$SCRATCH/pat.json" --context 64 && has bd_replay out 'throughput run: each round accepts' &&
  has bd_replay out 'from position 64'
# a sampled run replays a pattern too (its report records its own rounds)
run bd_sreplay 0 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -k 2 -n 8 \
  --accept-pattern "$SCRATCH/pat.json" --temperature 0.8 --context 16 --json &&
  has bd_sreplay out '"accept_pattern"' && has bd_sreplay out '"accepted_per_round"' &&
  if python3 -c "import json,sys; r=lambda f: [x.get('accepted_per_round') for x in json.load(open(f))['runs'][1:]]; \
sys.exit(r(sys.argv[1]) != r(sys.argv[2]))" "$SCRATCH/pat.json" "$SCRATCH/out"; then pass=$((pass + 1))
  else echo "FAIL bd_sreplay: its rounds are not the pattern's"; fail=$((fail + 1)); fi
run bd_patk 4 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -k 3 -n 8 \
  --accept-pattern "$SCRATCH/pat.json" && has bd_patk err 'pat.json: made at k = 2, this run has k = 3'
run bd_patbad 4 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" -k 2 -n 8 \
  --accept-pattern "$SCRATCH/p.txt" && has bd_patbad err 'p.txt: not valid JSON'
run bd_trunk 2 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" \
  --trunk synthetic:qwen3-next-80b && has bd_trunk err 'need --accept-pattern'
run bd_trunk2 2 "$MTPQ" bench-decode --backend cpu --target "$MODEL" --prompts "$SCRATCH/p.txt" --trunk nope \
  --accept-pattern "$SCRATCH/pat.json" && has bd_trunk2 err "trunk must be synthetic:NAME"
# a path-like TARGET that does not exist is "no such file or directory" at once, never a Hub request (the
# endpoint below would refuse the connection, and a request would retry for seconds)
mkdir -p "$SCRATCH/w/models"
MTPQ_ABS=$(cd "$(dirname "$MTPQ")" && pwd)/$(basename "$MTPQ")
for t in models/qwen3 ./qwen/x a/b/c; do
  (cd "$SCRATCH/w" && HF_ENDPOINT=http://127.0.0.1:9 "$MTPQ_ABS" inspect "$t" >"$SCRATCH/out" 2>"$SCRATCH/err")
  if [ $? -eq 3 ] && grep -q "$t: no such file or directory" "$SCRATCH/err"; then pass=$((pass + 1))
  else echo "FAIL path_like $t: $(cat "$SCRATCH/err")"; fail=$((fail + 1)); fi
done
(cd "$SCRATCH/w" && HF_ENDPOINT=http://127.0.0.1:9 HF_HUB_ETAG_TIMEOUT=1 "$MTPQ_ABS" quantize models/qwen3 --vocab x.safetensors \
  --out "$SCRATCH/w/o" >"$SCRATCH/out" 2>"$SCRATCH/err")
if [ $? -eq 3 ] && grep -q "no such file or directory" "$SCRATCH/err" && [ ! -e "$SCRATCH/w/o" ]; then pass=$((pass + 1))
else echo "FAIL path_like quantize: $(cat "$SCRATCH/err")"; fail=$((fail + 1)); fi
echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
