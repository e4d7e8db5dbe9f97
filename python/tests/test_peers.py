"""bench/peers/peers.py (stsa against PyTorch SDPA and FlexAttention) at a tiny
size: every stdout line is JSON, both sides agree, the ratios are numbers.
The benchmark itself is `make bench-peers`; this only keeps the script
working. Skipped without torch; the FlexAttention part also where
torch.compile cannot run (the script says why)."""

import importlib.util
import json
import pathlib

import pytest

torch = pytest.importorskip("torch")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "peers.py"
if not SCRIPT.is_file():  # tests run from an installed copy without the checkout
    pytest.skip(f"{SCRIPT} not found", allow_module_level=True)


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(peers, capsys, *argv):
    assert peers.main(list(argv)) == 0
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert lines[0]["bench"] == "machine"
    return lines[1:]


def check_comparison(line, tol):
    for side in ("stsa", "peer"):
        assert line[f"{side}_best_ms"] > 0 and line[f"{side}_gflops"] > 0
        assert line[f"{side}_median_ms"] >= line[f"{side}_best_ms"]
        assert line[f"err_{side}"] < tol, line
    assert line["ratio_best"] > 0 and line["ratio_median"] > 0
    assert line["max_abs_diff"] < 2 * tol, line


def test_dense(peers, capsys, threads):
    lines = run(peers, capsys, "--parts", "dense", "--dense-shapes", "100x2x32,64x3x16",
                "--no-video-dense", "--reps", "2", "--threads", str(threads),
                "--ref-rows", "8")
    assert [(ln["case"], ln["peer"]) for ln in lines] == [
        ("S=100 H=2 D=32 f32", "sdpa_f32"), ("S=100 H=2 D=32 bf16", "sdpa_bf16"),
        ("S=100 H=2 D=32 bf16 1 term", "sdpa_bf16"),
        ("S=64 H=3 D=16 f32", "sdpa_f32"), ("S=64 H=3 D=16 bf16", "sdpa_bf16"),
        ("S=64 H=3 D=16 bf16 1 term", "sdpa_bf16")]
    for ln in lines:
        check_comparison(ln, 1e-5 if ln["dtype"] == "f32" else 2e-2)


def test_gemm(peers, capsys, threads):
    lines = run(peers, capsys, "--parts", "gemm", "--gemm-shape", "96x2x32", "--gemm-n",
                "64", "--reps", "2", "--threads", str(threads))
    assert [(ln["case"], ln["peer"]) for ln in lines] == [
        ("64x64x64", "matmul_square"), ("96x32x96", "matmul_qk")]
    for ln in lines:
        assert ln["stsa_gflops"] > 0 and ln["peer_gflops"] > 0, ln
        # each of the three carries 4 significant digits
        want = ln["stsa_gflops"] / ln["peer_gflops"]
        assert abs(ln["gflops_ratio"] - want) <= 2e-3 * want, ln


def test_band_halfwidth(peers):
    import stsa
    for S, density in ((1000, 0.39), (32760, 0.39), (500, 0.12)):
        w = peers.band_halfwidth(S, density)
        got = stsa.Plan(stsa.masks.local(w, w), S, heads=1).stats.density
        assert abs(got - density) < 2.0 / S, (S, density, w, got)


def test_bad_shape_is_a_usage_error(peers):
    with pytest.raises(SystemExit):
        peers.parse_args(["--dense-shapes", "8192x4"])


def test_flex(peers, capsys, threads):
    why = peers.flex_unavailable()
    if why:
        pytest.skip(f"FlexAttention cannot run here: {why}")
    # temporal (permuted tensors) and svg (one mask per head, an SVG call):
    # the cases with the most to get wrong; one compile each
    lines = run(peers, capsys, "--parts", "flex", "--frames", "3", "--height", "4",
                "--width", "8", "--heads", "2", "--dim", "32", "--masks", "temporal,svg",
                "--reps", "1", "--threads", str(threads), "--ref-rows", "8")
    compiles = [ln for ln in lines if ln["bench"] == "flex_compile"]
    flex = [ln for ln in lines if ln["bench"] == "flex"]
    assert [ln["case"] for ln in compiles] == [ln["case"] for ln in flex] == ["temporal", "svg"]
    assert all(ln["first_call_s"] > 0 and 0 < ln["block_density"] <= 1 for ln in compiles)
    for ln in flex:
        check_comparison(ln, 1e-4)
        assert ln["permute_ms"] is not None and 0 < ln["density"] <= 1
