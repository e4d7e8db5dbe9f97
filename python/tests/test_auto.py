"""stsa.Auto (method auto): per head the best of SVG spatial, SVG temporal,
SVG2 and dense, on the built-in workload's spatial, temporal and semantic
heads; the report's candidates, choice and reason."""

import numpy as np
import pytest

import stsa

GEO = dict(frames=6, height=8, width=12)  # 576 video tokens
H, D = 3, 32
SETTINGS = dict(q_clusters=16, kv_clusters=40, sample_rows=32, density=0.25)


@pytest.fixture(scope="module")
def data():
    g = stsa.Geometry(**GEO)
    q, k, v, _ = stsa.workload(g, H, D, seed=3, kinds=["spatial", "temporal", "semantic"])
    dense = stsa.attention(q, k, v, layout="bshd")
    return g, q, k, v, dense


def rel(out, dense, h):
    return float(np.linalg.norm(out[:, :, h] - dense[:, :, h])
                 / np.linalg.norm(dense[:, :, h]))


def test_auto_without_budget_takes_the_lowest_bound(data):
    g, q, k, v, dense = data
    with stsa.Auto(g, **SETTINGS) as auto:
        out, info = auto(q, k, v, layout="bshd")
    assert stsa.AUTO_CANDIDATES == ("spatial", "temporal", "svg2", "dense")
    assert info.cand_bound.shape == (1, H, 4) and info.cand_density.shape == (1, H, 4)
    for h in range(H):
        bounds = info.cand_bound[0, h, :3]  # dense is no candidate without a budget
        c = stsa.AUTO_CANDIDATES.index(info.choice[0, h])
        assert info.choice_reason[0, h] == "lowest-bound"
        assert info.est_error[0, h] == bounds.min() == bounds[c]
        assert info.head_density[0, h] == info.cand_density[0, h, c]
        assert info.cand_bound[0, h, 3] == 0 and info.cand_density[0, h, 3] == 1
        assert rel(out, dense, h) < 1
    # the plain SVG session's bound of its kind is never below auto's
    with stsa.SVG(g, density=SETTINGS["density"],
                  sample_rows=SETTINGS["sample_rows"]) as svg:
        _, svg_info = svg(q, k, v, layout="bshd")
    assert (info.est_error <= svg_info.est_error).all()
    assert (svg_info.choice_reason == "method").all()
    assert np.isnan(svg_info.cand_bound).all()


@pytest.mark.parametrize("budget", [0.05, 0.2])
def test_auto_under_a_budget_runs_the_cheapest_within_it(data, budget):
    g, q, k, v, dense = data
    with stsa.Auto(g, max_error=budget, **SETTINGS) as auto:
        out, info = auto(q, k, v, layout="bshd")
    for h in range(H):
        within = info.cand_bound[0, h] <= budget
        assert within[3]  # dense is always within
        cheapest = info.cand_density[0, h][within].min()
        if info.choice_reason[0, h] == "recheck":  # the choice's second bound missed:
            # it climbed to a denser candidate that met the budget, or to dense
            c = stsa.AUTO_CANDIDATES.index(info.choice[0, h])
            assert within[c] and info.cand_density[0, h][c] >= cheapest
            cheapest = info.cand_density[0, h][c]
        assert info.head_density[0, h] == pytest.approx(cheapest, abs=1e-6)
        assert info.choice_reason[0, h] in ("cheapest", "none-met", "recheck")
        assert info.est_error[0, h] <= budget
        assert rel(out, dense, h) <= 2 * budget


def test_auto_dense_policy(data):
    g, q, k, v, _ = data
    with stsa.Auto(g, dense_steps=1, **SETTINGS) as auto:
        _, info = auto(q, k, v, step=0, layout="bshd")
    assert info.dense and (info.choice == "dense").all()
    assert (info.choice_reason == "policy").all()


def test_auto_keeps_the_layers_last_choices(data):
    # a warm call at the budget of the layer's last call runs what its heads
    # ran there again, bounded on its own output rows
    g, q, k, v, dense = data
    budget = 0.05
    with stsa.Auto(g, max_error=budget, **SETTINGS) as auto:
        _, first = auto(q, k, v, step=0, layout="bshd")
        out, kept = auto(q, k, v, step=1, layout="bshd")
        _, other = auto(q, k, v, step=2, max_error=0.2, layout="bshd")
    assert set(first.choice_reason[0]) <= {"cheapest", "none-met", "recheck"}  # it chooses
    assert (kept.choice_reason == "kept").any()
    for h in range(H):
        if kept.choice_reason[0, h] != "kept":
            assert kept.choice_reason[0, h] == "recheck"  # its kept choice missed
            continue
        c = stsa.AUTO_CANDIDATES.index(kept.choice[0, h])
        assert kept.choice[0, h] == first.choice[0, h]
        assert kept.head_density[0, h] == first.head_density[0, h]
        assert kept.cand_bound[0, h, c] == kept.est_error[0, h]
        assert np.isnan(np.delete(kept.cand_bound[0, h], c)).all()  # nothing profiled
        assert kept.choice[0, h] == "dense" or kept.est_error[0, h] <= budget
        assert rel(out, dense, h) <= 2 * budget
    assert not (other.choice_reason == "kept").any()  # another budget: chosen afresh


def test_auto_confirms_a_remembered_choice(data):
    # a layer chooses afresh at least every fourth call; on the same inputs a
    # head chooses what it ran at the last call, and its bound at 99.5%
    # confirms it without a recheck
    g, q, k, v, dense = data
    budget = 0.05
    confirmed = 0
    with stsa.Auto(g, max_error=budget, **SETTINGS) as auto:
        _, last = auto(q, k, v, step=0, layout="bshd")
        for step in range(1, 8):
            out, info = auto(q, k, v, step=step, layout="bshd")
            for h in range(H):
                if info.choice_reason[0, h] != "confirmed":
                    continue
                confirmed += 1
                assert not (info.choice_reason == "kept").any()  # a call that chose
                assert info.choice[0, h] == last.choice[0, h]
                assert info.head_density[0, h] == last.head_density[0, h]
                assert info.est_error[0, h] <= budget
                assert rel(out, dense, h) <= 2 * budget
            last = info
    assert confirmed > 0
