#!/usr/bin/env bash
# The benchmarks behind docs/benchmarks.md (opt-in, ~15-20 minutes on 2 cores).
#   bench/run_all.sh [out-dir (default bench/results)] [threads (default 2)]
# Every line of every *.jsonl is one JSON object as printed by `stsa ... --json`.
# The machine is shared and noisy: compare ratios taken in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
t=${2:-2}
stsa=build/stsa
[ -x $stsa ] || make build >/dev/null
mkdir -p "$out"

echo "== peak"
$stsa peak --threads "$t" --json | tee "$out/peak.jsonl"

echo "== dense, S = 8192, 4 heads (the dense kernel's targets: % of the FMA peak)"
: >"$out/dense.jsonl"
for d in 128 64; do
  for kv in f32 f16; do
    $stsa bench dense --seq 8192 --heads 4 --dim $d --kv-dtype $kv --threads "$t" --reps 5 \
      --json | tee -a "$out/dense.jsonl"
  done
done

echo "== B0-B3 at Wan-720p length (75,600 tokens, band keeping 39%)"
$stsa bench sparse --seq 75600 --heads 1 --dim 128 --density 0.39 --mode all --threads "$t" \
  --reps 2 --json | tee "$out/splash_b0_b3.jsonl"

echo "== exact mode at 10-15% density"
: >"$out/sparse_density.jsonl"
for dens in 0.12 0.25; do
  $stsa bench sparse --seq 32768 --heads 2 --dim 128 --density $dens --threads "$t" --reps 2 \
    --json | tee -a "$out/sparse_density.jsonl"
done

echo "== linear growth with length at a fixed band (half-width 4096)"
: >"$out/sparse_length.jsonl"
for s in 16384 32768 65536 131072; do
  $stsa bench sparse --seq $s --heads 1 --dim 128 --band 4096 --no-dense --threads "$t" \
    --reps 2 --json | tee -a "$out/sparse_length.jsonl"
done

echo "== SVG per preset (2 heads)"
: >"$out/svg.jsonl"
$stsa bench svg --preset wan21-720p --heads 2 --threads "$t" --reps 2 --compare-permute --json \
  | tee -a "$out/svg.jsonl"
$stsa bench svg --preset wan21-720p --heads 2 --threads "$t" --q-tile 192 --kv-tile 256 \
  --json | tee -a "$out/svg.jsonl"
$stsa bench svg --preset wan21-480p --heads 2 --threads "$t" --reps 2 --compare-permute --json \
  | tee -a "$out/svg.jsonl"
$stsa bench svg --preset hunyuan-720p --heads 2 --threads "$t" --json | tee -a "$out/svg.jsonl"
echo "== done: $out"
