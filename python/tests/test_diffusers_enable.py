"""stsa.diffusers.enable on tiny random Wan, HunyuanVideo and CogVideoX
transformers: no geometry, no callback. Skipped without torch and diffusers
(`make test-diffusers` installs them)."""

import types
import dataclasses
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

import stsa.diffusers  # noqa: E402
from diffusers_models import inputs, make, run  # noqa: E402

KINDS = ["wan", "hunyuan", "cogvideox", "cogvideox15"]


def rel_max(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("kind", KINDS)
def test_dense_equals_diffusers_attention(kind):
    model = make(kind)
    # a CFG-like batch of two; HunyuanVideo's text padded differently in each
    kw = inputs(kind, batch=2, text_real=[4, 6])
    want = run(model, kw)
    handle = stsa.diffusers.enable(model, method="dense")
    got = run(model, kw)
    assert rel_max(got, want) <= 1e-5
    (stat,) = handle.stats()
    assert stat.dense_calls == handle.layers * (2 if kind == "hunyuan" else 1) > 0
    assert stat.sdpa_calls == 0 and stat.sparse_calls == 0
    handle.disable()
    assert torch.equal(run(model, kw), want)


@pytest.mark.parametrize("kind", KINDS)
def test_calls_turn_sparse_after_the_dense_steps(kind):
    model = make(kind)
    handle = stsa.diffusers.enable(model, dense_steps=2, dense_layers=1, density=0.3)
    # two calls per step (a CFG pair), timesteps going down, then a new generation
    for t in (900, 900, 800, 800, 700, 700, 900):
        run(model, inputs(kind, timestep=t, text_real=[4]))
    rows = [(s.generation, s.step, s.dense_calls, s.sparse_calls) for s in handle.stats()]
    n = handle.layers
    assert rows == [(0, 0, 2 * n, 0), (0, 1, 2 * n, 0), (0, 2, 2, 2 * (n - 1)), (1, 0, n, 0)]
    sparse = handle.stats()[2]
    assert 0 < sparse.density < 1 and sparse.est_error > 0 and sparse.ms > 0 < sparse.cpu_ms
    handle.disable()


def test_auto_turns_sparse_and_says_what_each_head_chose():
    model = make("wan")
    handle = stsa.diffusers.enable(model, method="auto", dense_steps=1, dense_layers=0)
    for t in (900, 800):
        run(model, inputs("wan", timestep=t, batch=2))
    n = handle.layers
    dense, sparse = handle.stats()
    assert (dense.dense_calls, dense.sparse_calls, dense.choices) == (n, 0, {})
    assert (sparse.dense_calls, sparse.sparse_calls, sparse.budget_dense_calls) == (0, n, 0)
    assert 0 < sparse.density < 1 and sparse.est_error > 0
    # every head of every call (2 batch entries x 2 heads), by the candidate it ran
    assert sum(sparse.choices.values()) == n * 2 * 2
    assert set(sparse.choices) <= set(stsa.AUTO_CANDIDATES)
    assert sparse.choices.get("dense", 0) < n * 4  # some head ran sparse
    # SVG2's settings: the published top-p, not the preset's SVG window density
    (session,) = handle._sessions.values()
    assert type(session) is stsa.Auto and session.config.svg2.top_p == pytest.approx(0.9)
    handle.disable()


def test_auto_under_a_budget_keeps_the_last_steps_choices_and_counts_them():
    model = make("wan")
    handle = stsa.diffusers.enable(model, method="auto", max_error=0.05, dense_steps=0,
                                   dense_layers=0)
    for t in (900, 800, 700):
        run(model, inputs("wan", timestep=t))
    first, *later = handle.stats()
    n = handle.layers
    assert first.kept_heads == 0  # a cold layer chooses
    # a warm step at the budget of the step before keeps what its heads ran
    # there (1 batch entry x 2 heads a call); at most three in a row
    assert all(0 <= s.kept_heads <= n * 2 for s in later)
    assert sum(s.kept_heads for s in later) > 0
    assert all(s.est_error <= 0.05 for s in handle.stats())
    handle.disable()


@pytest.mark.parametrize("method", ["svg", "svg2", "auto"])
def test_a_budget_no_sparse_head_meets_sends_every_head_dense_and_says_so(method):
    model = make("wan")
    kw = inputs("wan", batch=2)
    want = run(model, kw)
    handle = stsa.diffusers.enable(model, method=method, max_error=1e-9, dense_steps=0,
                                   dense_layers=0)
    with pytest.warns(RuntimeWarning, match="error budget max_error=1e-09 sent 2 calls dense"):
        got = run(model, kw)
    assert rel_max(got, want) <= 1e-5  # dense: diffusers' own attention
    (stat,) = handle.stats()
    n = handle.layers
    assert (stat.sparse_calls, stat.dense_calls, stat.budget_dense_calls) == (0, 0, n)
    assert stat.budget_dense_heads == n * 2 * 2 and stat.est_error == 0
    assert stat.choices == ({"dense": n * 4} if method == "auto" else {})
    handle.disable()


def test_a_budget_that_widens_some_heads_says_how_many():
    model = make("wan")
    handle = stsa.diffusers.enable(model, method="svg", max_error=0.05, density=0.2,
                                   dense_steps=0, dense_layers=0)
    run(model, inputs("wan", batch=2))
    (stat,) = handle.stats()
    assert stat.budget_raised_heads + stat.budget_dense_heads > 0  # 0.2 alone misses 0.05
    assert stat.budget_raised_heads + stat.budget_dense_heads <= handle.layers * 4
    assert stat.sparse_calls == 0 or stat.est_error <= 0.05
    handle.disable()


def test_threads_follow_torch_unless_given():
    model = make("wan")
    before = torch.get_num_threads()
    svg = stsa.diffusers.enable(model, dense_steps=0, dense_layers=0)
    try:
        run(model, inputs("wan"))
        (session,) = svg._sessions.values()
        assert session.context.get("threads") == before
        torch.set_num_threads(1)
        run(model, inputs("wan", timestep=400))
        assert session.context.get("threads") == 1
        svg.disable()
        given = stsa.diffusers.enable(model, threads=3, dense_steps=0, dense_layers=0)
        run(model, inputs("wan"))
        (session,) = given._sessions.values()
        assert session.context.get("threads") == 3
        given.disable()
    finally:
        torch.set_num_threads(before)


def test_preset_defaults_by_model_and_resolution():
    model = make("wan")
    handle = stsa.diffusers.enable(model)
    run(model, inputs("wan"))
    assert handle.preset == "wan21-480p" and handle.dense_steps == 10
    handle.disable()
    model = make("hunyuan")
    handle = stsa.diffusers.enable(model, preset="hunyuan-720p")
    run(model, inputs("hunyuan"))
    assert handle.preset == "hunyuan-720p" and handle.dense_steps == 5
    handle.disable()


@pytest.mark.parametrize("kind", ["cogvideox", "cogvideox15"])
def test_cogvideox_takes_its_preset_with_32_sampled_rows(kind):
    """Sparse VideoGen profiles 32 query rows for CogVideoX (64 elsewhere):
    the preset's count, not a default, unless an override gives one."""
    model = make(kind)
    for overrides, rows in (({}, 32), ({"sample_rows": 48}, 48)):
        handle = stsa.diffusers.enable(model, dense_steps=0, dense_layers=0, **overrides)
        run(model, inputs(kind))
        assert handle.preset == "cogvideox15"
        (session,) = handle._sessions.values()
        assert session.config.sample_rows == rows
        # the token grid of this call: text first, then 3 frames of 4 x 6
        ((geometry, _),) = handle._sessions
        assert (geometry.text, geometry.text_pos, geometry.frames, geometry.height,
                geometry.width) == (8, "prefix", 3, 4, 6)
        handle.disable()
    handle = stsa.diffusers.enable(model)
    run(model, inputs(kind))
    assert (handle.dense_steps, handle._config()["dense_layers"]) == (10, 1)
    handle.disable()


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_resolution_mid_run(kind):
    model = make(kind)
    handle = stsa.diffusers.enable(model, dense_steps=0, dense_layers=0)
    run(model, inputs(kind, timestep=900))
    # 2 x 4 x 8 = 64 tokens (CogVideoX 1.5: 4 latent frames, 2 token frames)
    latent = (4 if kind == "cogvideox15" else 2, 8, 16)
    kw = inputs(kind, timestep=800, latent=latent)
    want = run(model, kw)
    handle.disable()
    handle = stsa.diffusers.enable(model, dense_steps=0, dense_layers=0)
    run(model, inputs(kind, timestep=900))
    out = run(model, kw)
    assert out.shape == want.shape
    n = handle.layers
    assert [s.sparse_calls for s in handle.stats()] == [n, n]
    assert {(g.frames, g.height, g.width) for g, _ in handle._sessions} == \
        {(3, 4, 6), (2, 4, 8)}
    handle.disable()


def test_wan22_two_transformers_share_the_steps():
    high, low = make("wan", seed=0), make("wan", seed=1)
    pipe = types.SimpleNamespace(transformer=high, transformer_2=low)
    handle = stsa.diffusers.enable(pipe, dense_steps=1, dense_layers=0)
    assert handle.layers == 4
    run(high, inputs("wan", timestep=900))
    run(low, inputs("wan", timestep=400))
    assert [(s.step, s.dense_calls, s.sparse_calls) for s in handle.stats()] == \
        [(0, 2, 0), (1, 0, 2)]
    handle.disable()


def test_a_warning_when_nothing_turned_sparse():
    model = make("wan")
    handle = stsa.diffusers.enable(model, dense_steps=1, dense_layers=0)
    for p in model.parameters():
        p.requires_grad_(True)
    with pytest.warns(RuntimeWarning, match="no attention call was sparse"):
        for t in (900, 800):  # with gradients: every call stays with SDPA
            model(**inputs("wan", timestep=t))
    assert all(s.sdpa_calls == 2 and s.why for s in handle.stats())
    handle.disable()
    model = make("wan")
    # no warning where calls turn sparse, nor where the policy keeps every layer dense
    for dense_layers in (0, 2):
        handle = stsa.diffusers.enable(model, dense_steps=1, dense_layers=dense_layers)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for t in (900, 800):
                run(model, inputs("wan", timestep=t))
        assert handle.stats()[1].sparse_calls == (2 if dense_layers == 0 else 0)
        handle.disable()


def test_bad_arguments():
    with pytest.raises(TypeError, match="not a transformer stsa knows"):
        stsa.diffusers.enable(torch.nn.Linear(2, 2))
    model = make("wan")
    with pytest.raises(ValueError, match="method"):
        stsa.diffusers.enable(model, method="flash")
    with pytest.raises(ValueError, match="max_error = 0.05 is a setting of methods 'svg', "
                       "'svg2' and 'auto', not 'dense'"):
        stsa.diffusers.enable(model, method="dense", max_error=0.05)
    with pytest.raises(ValueError, match="unknown SVG preset"):
        stsa.diffusers.enable(model, preset="wan99")
    handle = stsa.diffusers.enable(model)
    with pytest.raises(ValueError, match="already enabled"):
        stsa.diffusers.enable(model)
    handle.disable()
    stsa.diffusers.enable(model).disable()


def stsa_cli():
    import os
    path = os.environ.get("STSA_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("STSA_CLI names no stsa binary (make test-diffusers sets it)")
    return path


@pytest.mark.parametrize("kind", ["wan", "hunyuan"])
def test_dump_round_trips_through_stsa_run(kind, tmp_path):
    import shlex
    import subprocess

    from safetensors import safe_open
    from safetensors.torch import load_file
    cli = stsa_cli()
    model = make(kind)
    steps = [inputs(kind, timestep=t, text_real=[4]) for t in (900, 800)]
    want = [run(model, kw) for kw in steps]
    path = tmp_path / "qkv.safetensors"
    handle = stsa.diffusers.dump(model, path, layer=1, step=1)
    got = [run(model, kw) for kw in steps]
    assert all(torch.equal(g, w) for g, w in zip(got, want))  # the model is untouched
    handle.disable()
    qkv = load_file(path)
    # HunyuanVideo: 72 video tokens and 4 real of 6 text tokens
    assert qkv["q"].shape == (1, 72 if kind == "wan" else 76, 2, 32 if kind == "wan" else 16)
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    assert (meta["layer"], meta["step"], meta["frames"], meta["height"], meta["width"]) == \
        ("1", "1", "3", "4", "6")
    out = tmp_path / "out.safetensors"
    args = ["run"] + handle.flags + ["--mode", "dense", "--out", str(out), "--quiet"]
    subprocess.run([cli] + args, check=True, capture_output=True, timeout=300)
    q, k, v = (qkv[n].transpose(1, 2) for n in ("q", "k", "v"))
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2)
    result = load_file(out)
    (name,) = result
    assert rel_max(result[name], sdpa) <= 1e-5
    # and SVG on the same file runs with the geometry the command carries
    args = shlex.split(handle.command)
    assert args[:2] == ["stsa", "run"] and args[-4:] == ["--layer", "1", "--step", "1"]
    report = tmp_path / "report.json"
    subprocess.run([cli] + args[1:] + ["--report", str(report), "--quiet"], check=True,
                   capture_output=True, timeout=300)
    assert report.stat().st_size > 0


def test_no_mode_is_left_behind():
    """Every hook that entered a TorchFunctionMode left it (run last here)."""
    from torch.overrides import _get_current_function_mode_stack
    assert _get_current_function_mode_stack() == []


def test_a_warning_when_threads_spin(monkeypatch):
    """torch started the OpenMP runtime first and nobody set a wait policy:
    enable() says once that stsa's threads spin; a user's policy, or a
    runtime stsa started passive, says nothing."""
    from stsa import _enable, _lib, _wait_policy
    spinning = _wait_policy.ThreadingInfo("libgomp.so.1", "unknown", "loaded before stsa",
                                          "it was loaded before stsa")
    for info, user, warns in ((spinning, [], True),
                              (spinning, ["OMP_WAIT_POLICY=passive"], False),
                              (dataclasses.replace(spinning, set_by="stsa"), [], False)):
        monkeypatch.setattr(_lib, "threading_info", info)
        monkeypatch.setattr(_wait_policy, "_user_settings", lambda user=user: user)
        monkeypatch.setattr(_enable, "_spin_warned", False)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            stsa.diffusers.enable(make("wan")).disable()
            stsa.diffusers.enable(make("wan")).disable()  # once a process
        spins = [w for w in seen if "threads spin" in str(w.message)]
        assert len(spins) == (1 if warns else 0), (info.set_by, user, spins)
