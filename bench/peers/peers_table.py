#!/usr/bin/env python3
"""Markdown tables from the JSON lines of bench/peers/peers.py, one file per run:

    python bench/peers/peers_table.py run1.jsonl run2.jsonl run3.jsonl

Each comparison is a row with one column per run holding "best / median"
ratio (peer time / stsa time: above 1, stsa is faster), then the GFLOP/s
of both sides (best call; the range over runs), the largest max-abs
difference seen and each side's largest max-abs error against the float64
reference rows. A second table gives FlexAttention's compile and block-mask
times per run (the inductor cache each run found is in its JSON)."""

import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def span(values, fmt):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else \
        f"{fmt.format(lo)}–{fmt.format(hi)}"


def worst(lines, key):
    """The largest value of key over the runs ('—' where not measured)."""
    values = [ln[key] for ln in lines if ln.get(key) is not None]
    return f"{max(values):.1e}" if values else "—"


def by_case(runs, benches, key):
    """key(line) -> one line per run (None where a run has none), for the
    lines of the given bench kinds, in first-seen order."""
    rows = {}
    for i, lines in enumerate(runs):
        for ln in lines:
            if ln["bench"] in benches:
                rows.setdefault(key(ln), [None] * len(runs))[i] = ln
    return rows


def comparisons(runs):
    """(bench, case) -> one line per run, in first-seen order."""
    return by_case(runs, ("dense", "flex"), lambda ln: (ln["bench"], ln["case"]))


PEERS = {"sdpa_f32": "SDPA f32", "sdpa_bf16": "SDPA bf16", "flex": "FlexAttention"}
STSA = {"stsa_f32": "stsa.attention", "stsa_bf16": "stsa.attention",
        "stsa_bf16_1": "stsa.attention (bf16_terms=1)",
        "stsa_sparse": "stsa.sparse_attention", "stsa_svg": "stsa.SVG"}


def ratio_table(runs):
    n = len(runs)
    head = ("| comparison | " + " | ".join(f"run {i + 1}" for i in range(n))
            + " | stsa GFLOP/s | peer GFLOP/s | max-abs diff | error vs f64: stsa / peer |")
    out = [head, "|" + "---|" * (n + 5)]
    for (bench, case), lines in comparisons(runs).items():
        got = [ln for ln in lines if ln]
        first = got[0]
        where = f"S={first['S']} H={first['H']} D={first['D']}" if bench == "dense" else case
        name = f"{STSA[first['stsa']]} vs {PEERS[first['peer']]}, {where}"
        if bench == "flex":
            name += f" (density {first['density']:.3f})"
        cells = [f"{ln['ratio_best']:.2f}× / {ln['ratio_median']:.2f}×" if ln else "—"
                 for ln in lines]
        out.append(f"| {name} | " + " | ".join(cells)
                   + f" | {span([ln['stsa_gflops'] for ln in got], '{:.0f}')}"
                   f" | {span([ln['peer_gflops'] for ln in got], '{:.0f}')}"
                   f" | {max(ln['max_abs_diff'] for ln in got):.1e}"
                   f" | {worst(got, 'err_stsa')} / {worst(got, 'err_peer')} |")
    return out


def compile_s(line):
    """First call minus a warm one; under a second, within the calls' noise
    (the inductor cache held the kernel), it reads "cached"."""
    return f"{line['compile_s']:.1f}" if line["compile_s"] >= 1 else "cached"


def compile_table(runs):
    cases = by_case(runs, ("flex_compile",), lambda ln: ln["case"])
    if not cases:
        return []
    n = len(runs)
    out = ["| FlexAttention mask | " + " | ".join(
        f"run {i + 1}: compile s / block mask s" for i in range(n)) + " |",
        "|" + "---|" * (n + 1)]
    for case, lines in cases.items():
        out.append(f"| {case} | " + " | ".join(
            f"{compile_s(ln)} / {ln['block_mask_ms'] / 1e3:.1f}" if ln else "—"
            for ln in lines) + " |")
    return out


def gemm_table(runs):
    """The gemm part: stsa's dense attention as a fraction of torch.matmul's
    GFLOP/s in the same rounds, per run."""
    cases = by_case(runs, ("gemm",), lambda ln: ln["case"])
    if not cases:
        return []
    n = len(runs)
    out = ["| torch.matmul f32 | " + " | ".join(
        f"run {i + 1}: matmul / stsa attention GFLOP/s (ratio)" for i in range(n)) + " |",
        "|" + "---|" * (n + 1)]
    for case, lines in cases.items():
        out.append(f"| {case} | " + " | ".join(
            f"{ln['peer_gflops']:.0f} / {ln['stsa_gflops']:.0f} ({ln['gflops_ratio']:.2f})"
            if ln else "—" for ln in lines) + " |")
    return out


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [load(p) for p in paths]
    for lines in runs:
        m = next((ln for ln in lines if ln["bench"] == "machine"), None)
        if m:
            print(f"- {m['date']}: {m['cpu']} ({', '.join(m['flags'])}), {m['threads']} "
                  f"threads, {m['reps']} rounds, torch {m['torch']} "
                  f"({m['torch_cpu_capability']}), stsa backend {m['stsa_backend']}")
    print()
    print("\n".join(ratio_table(runs)))
    for table in (compile_table(runs), gemm_table(runs)):
        if table:
            print()
            print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
