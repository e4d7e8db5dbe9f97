#!/usr/bin/env bash
# test_cli_files.sh STSA_BINARY — `stsa run` never loses a file.
#
# Outputs that name an input (by any spelling, or a hard link), two outputs
# that are one file, outputs that are devices, FIFOs, directories or links,
# a --report that cannot be written after --out could be, a late rename that
# fails, SIGTERM with every output staged, FIFO inputs (must not hang), and
# the permission bits and owner of a replaced file. Every check compares the
# files' checksums before and after. Uses the tool's test hook
# STSA_TEST_COMMIT_GATE (the tool waits, with every output staged, while that
# file exists). Prints "test_cli_files: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_files "$@"
sum() { cksum <"$1"; }
# no staging or writer temp file anywhere under the folder
no_leftovers() { ! find . -name '*.stsa-run.*' | grep -q .; }

# ---------------------------------------------------------------- inputs
# gen PATH S H D SEED: a safetensors file with f32 q, k, v of [1, S, H, D]
cat >gen.py <<'PY'
import random, sys
from tensor_dumps import write_npy, write_st
path, S, H, D, seed = sys.argv[1], *map(int, sys.argv[2:6])
rnd = random.Random(seed)
shape = [1, S, H, D]
qkv = {name: ([rnd.gauss(0, 1) for _ in range(S * H * D)], shape) for name in 'qkv'}
write_st(path, qkv, 'F32')
# the same tensors as .npy files next to it (PATH minus .safetensors + .q.npy ...)
base = path[:-len('.safetensors')]
for name, (flat, _) in qkv.items():
    write_npy('%s.%s.npy' % (base, name), flat, shape)
PY
F=3 HP=4 WP=5
python3 gen.py in.safetensors $((F * HP * WP)) 2 16 1
cp in.safetensors pristine.bin
# each check starts from the original input (in place: a hard link to it stays one)
restore() { cmp -s pristine.bin in.safetensors || cat pristine.bin >in.safetensors; }
geo=(--layout bshd --frames $F --height $HP --width $WP --mode dense --quiet)
RUN=("$STSA" run --in in.safetensors "${geo[@]}")

# refuse NAME PATTERN CMD...: fails, PATTERN on stderr, in.safetensors and
# every file named in KEEP unchanged, no leftovers
KEEP=()
refuse() {
  local name=$1 pattern=$2
  shift 2
  local before=() f
  restore
  for f in in.safetensors "${KEEP[@]}"; do before+=("$(sum "$f" 2>/dev/null || echo none)"); done
  local rc=0 i=0
  timeout 20 "$@" >"$name.stdout" 2>"$name.stderr" || rc=$?
  if [ "$rc" = 0 ]; then
    bad "$name: succeeded but should have refused"
    return
  fi
  if [ "$rc" = 124 ]; then
    bad "$name: hung (killed after 20 s)"
    return
  fi
  if ! grep -q -- "$pattern" "$name.stderr"; then
    bad "$name: stderr lacks '$pattern': $(head -c 400 "$name.stderr")"
    return
  fi
  for f in in.safetensors "${KEEP[@]}"; do
    if [ "$(sum "$f" 2>/dev/null || echo none)" != "${before[$i]}" ]; then
      bad "$name: $f was changed"
      return
    fi
    i=$((i + 1))
  done
  if ! no_leftovers; then
    bad "$name: a staging file was left: $(find . -name '*.stsa-run.*')"
    return
  fi
  ok
}

# ------------------------------------------- item 5: an output is an input
refuse out-is-input "is the input --in" "${RUN[@]}" --out ./in.safetensors
refuse out-is-input-abs "is the input --in" "${RUN[@]}" --out "$TMP/in.safetensors"
refuse report-is-input "is the input --in" "${RUN[@]}" --out o1.safetensors --report in.safetensors
ln in.safetensors hardlink.safetensors
refuse out-is-hardlink "is the input --in" "${RUN[@]}" --out hardlink.safetensors
mkdir sub
KEEP=(in.k.npy)
refuse out-is-npy-input "is the input --in-k" "$STSA" run --in-q in.q.npy --in-k in.k.npy \
  --in-v in.v.npy "${geo[@]}" --out sub/../in.k.npy
KEEP=()
# --out and --report one file: existing (two spellings) and not yet existing
echo previous >same.json
KEEP=(same.json)
refuse out-is-report-existing "name the same file" "${RUN[@]}" --out same.json --report ./same.json
KEEP=()
refuse out-is-report-new "name the same file" "${RUN[@]}" --out new.json --report ./new.json
[ ! -e new.json ] && ok || bad "out-is-report-new: new.json was created"
refuse out-is-report-new-dir "name the same file" "${RUN[@]}" --out sub/x.json --report ./sub/../sub/x.json

# ------------------------------- item 6: only regular files are replaced
# a device node like /dev/null (made here; only root may): without root, a
# FIFO stands in for it
ROOT=$([ "$(id -u)" = 0 ] && echo 1 || echo 0)
if [ "$ROOT" = 1 ]; then mknod null-dev c 1 3; else mkfifo null-dev; fi
refuse out-is-device "not a regular file" "${RUN[@]}" --out null-dev
[ -c null-dev ] || [ -p null-dev ] && ok || bad "out-is-device: null-dev was replaced"
mkfifo out-fifo
refuse out-is-fifo "not a regular file" "${RUN[@]}" --out out-fifo
[ -p out-fifo ] && ok || bad "out-is-fifo: out-fifo is no longer a FIFO"
mkdir out-dir
refuse out-is-dir "is a directory" "${RUN[@]}" --out out-dir
refuse report-is-dir "is a directory" "${RUN[@]}" --out o2.safetensors --report out-dir
echo previous >target.safetensors
ln -s target.safetensors link.safetensors
KEEP=(target.safetensors)
refuse out-is-symlink "symbolic link" "${RUN[@]}" --out link.safetensors
[ -L link.safetensors ] && ok || bad "out-is-symlink: the link was replaced"

# ------------- item 7: a failing run leaves every existing output untouched
echo previous >kept.safetensors
KEEP=(kept.safetensors)
# the report target is an existing directory: refused before --out is written
refuse report-dir-keeps-out "is a directory" "${RUN[@]}" --out kept.safetensors --report out-dir
refuse report-no-folder-keeps-out "no-such-dir" "${RUN[@]}" --out kept.safetensors \
  --report no-such-dir/r.json
KEEP=()

# gate_start OUTS...: starts a run that stops with every output staged;
# waits (bounded) until the staging files exist
gate_start() {
  touch gate
  STSA_TEST_COMMIT_GATE="$TMP/gate" "${RUN[@]}" "$@" >gate.stdout 2>gate.stderr &
  bg_pid=$!
  local tries=0 want=$(($# / 2)) n
  while [ $tries -lt 3000 ]; do
    n=$(find . -maxdepth 1 -name '*.stsa-run.*' | wc -l)
    [ "$n" -ge "$want" ] && return 0
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.02
    tries=$((tries + 1))
  done
  return 1
}
gate_wait() {
  local rc=0
  { wait "$bg_pid"; } 2>/dev/null || rc=$?
  bg_pid=
  return $rc
}

# a late rename fails (the report target became a directory after the
# checks): --out is rolled back, the message names the errno and the files
echo previous-out >late.safetensors
echo previous-report >late.json
chmod 640 late.safetensors
s_out=$(sum late.safetensors)
restore
if gate_start --out late.safetensors --report late.json; then
  rm late.json
  mkdir late.json
  rm gate
  rc=0
  gate_wait || rc=$?
  if [ "$rc" != 2 ]; then
    bad "late-rename: exit $rc, expected 2"
  elif ! grep -q "Is a directory" gate.stderr; then
    bad "late-rename: no errno text in: $(cat gate.stderr)"
  elif ! grep -q "written: none" gate.stderr; then
    bad "late-rename: message does not say what was written: $(cat gate.stderr)"
  elif [ "$(sum late.safetensors)" != "$s_out" ] || [ "$(stat -c %a late.safetensors)" != 640 ]; then
    bad "late-rename: --out was not restored"
  elif ! no_leftovers; then
    bad "late-rename: leftovers: $(find . -name '*.stsa-run.*')"
  else
    ok
  fi
else
  bad "late-rename: the run never stopped with its outputs staged"
  gate_wait || true
fi
rm -rf late.json gate

# ------------------------ item 8: SIGTERM leaves no staging file behind
echo previous-out >sig.safetensors
echo previous-report >sig.json
s_out=$(sum sig.safetensors)
s_rep=$(sum sig.json)
restore
if gate_start --out sig.safetensors --report sig.json; then
  kill -TERM "$bg_pid"
  rc=0
  gate_wait || rc=$?
  if [ "$rc" != 143 ]; then
    bad "sigterm: exit $rc, expected 143 (killed by SIGTERM)"
  elif ! no_leftovers; then
    bad "sigterm: staging files left: $(find . -name '*.stsa-run.*')"
  elif [ "$(sum sig.safetensors)" != "$s_out" ] || [ "$(sum sig.json)" != "$s_rep" ]; then
    bad "sigterm: an existing output was changed"
  else
    ok
  fi
else
  bad "sigterm: the run never stopped with its outputs staged"
  gate_wait || true
fi
rm -f gate
# SIGHUP too, with only --out
restore
if gate_start --out sig.safetensors; then
  kill -HUP "$bg_pid"
  rc=0
  gate_wait || rc=$?
  if [ "$rc" = 129 ] && no_leftovers && [ "$(sum sig.safetensors)" = "$s_out" ]; then ok; else
    bad "sighup: exit $rc, leftovers: $(find . -name '*.stsa-run.*')"
  fi
else
  bad "sighup: the run never stopped with its outputs staged"
  gate_wait || true
fi
rm -f gate

# --------------- item 9: FIFO inputs fail at once; modes of replaced files
mkfifo fifo.safetensors fifo.npy
refuse fifo-in "not a regular file" "$STSA" run --in fifo.safetensors "${geo[@]}" \
  --out o3.safetensors
refuse fifo-npy "not a regular file" "$STSA" run --in-q in.q.npy --in-k fifo.npy \
  --in-v in.v.npy "${geo[@]}" --out o3.safetensors
refuse fifo-report "not a regular file" "$STSA" plot kinds --report fifo.safetensors \
  --out o3.png
refuse fifo-bench "not a regular file" "$STSA" plot speedup --bench fifo.npy --out o3.png
refuse missing-in "No such file" "$STSA" run --in missing.safetensors "${geo[@]}" \
  --out o3.safetensors

echo previous >mode.safetensors
echo previous >mode.json
chmod 640 mode.safetensors
chmod 600 mode.json
want_owner="$(id -u) $(id -g)"
if [ "$ROOT" = 1 ]; then
  chown 1234:4321 mode.safetensors
  want_owner="1234 4321"
fi
restore
if "${RUN[@]}" --out mode.safetensors --report mode.json 2>mode.stderr; then
  m_out=$(stat -c '%a %u %g' mode.safetensors)
  m_rep=$(stat -c %a mode.json)
  if [ "$m_out" = "640 $want_owner" ] && [ "$m_rep" = 600 ] && [ "$(head -c 1 mode.json)" = "{" ]; then
    ok
  else
    bad "modes: --out is '$m_out' (want '640 $want_owner'), --report is $m_rep (want 600)"
  fi
else
  bad "modes: the run failed: $(cat mode.stderr)"
fi
# a new file gets the umask's mode as before
rm -f fresh.safetensors
(umask 027 && "${RUN[@]}" --out fresh.safetensors) && [ "$(stat -c %a fresh.safetensors)" = 640 ] && ok ||
  bad "fresh: mode $(stat -c %a fresh.safetensors 2>/dev/null), expected 640 under umask 027"

# ---------------- the same rules for the pictures of stsa plot (--out PNG)
refuse plot-out-is-input "is the input --in" "$STSA" plot attention --in in.safetensors \
  --layout bshd --frames $F --height $HP --width $WP --head 1 --query 0,1,1 --out ./in.safetensors
echo '{"per_head": [{"batch": 0, "head": 0, "kind": "spatial"}]}' >kinds.json
KEEP=(kinds.json)
refuse plot-out-is-report "is the input --report" "$STSA" plot kinds --report kinds.json \
  --out kinds.json
KEEP=()
refuse plot-out-is-device "not a regular file" "$STSA" plot plan --frames 5 --height 6 \
  --width 8 --out null-dev
[ -c null-dev ] || [ -p null-dev ] && ok || bad "plot-out-is-device: null-dev was replaced"
echo previous >plot.png
chmod 604 plot.png
if "$STSA" plot plan --frames 5 --height 6 --width 8 --out plot.png 2>plot.stderr &&
  [ "$(stat -c %a plot.png)" = 604 ] && [ "$(head -c 4 plot.png | tail -c 3)" = PNG ] && no_leftovers; then
  ok
else
  bad "plot-mode: $(stat -c %a plot.png) $(cat plot.stderr)"
fi

# ------------------------- item 13: a report that cannot be opened says why
refuse plot-missing-report "cannot open it: No such file" "$STSA" plot kinds \
  --report missing.json --out o4.png
grep -q "line -1" plot-missing-report.stderr && bad "plot-missing-report: says line -1" || ok
printf '{"per_head": [\n  {"head": 0,]\n}\n' >broken.json
refuse plot-broken-report "line 2" "$STSA" plot kinds --report broken.json --out o4.png

finish
