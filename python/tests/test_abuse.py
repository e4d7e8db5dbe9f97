"""Misuse of the Python API (issue 30, "Python abuses"): every wrong argument
is refused with a message that names it and the value given, as a
ValueError / TypeError (never a cffi or numpy internal, never a crash); what
the docs promise to copy is copied."""

import copy
import math
import pickle
import re

import numpy as np
import pytest

import reference as ref
import stsa
from stsa import masks

SHAPE = (1, 24, 2, 16)  # bshd


def qkv(seed=0):
    return (ref.rand(SHAPE, np.float32, seed), ref.rand(SHAPE, np.float32, seed + 1),
            ref.rand(SHAPE, np.float32, seed + 2))


def misaligned(a):
    """A C-contiguous copy of `a` whose data pointer is 1 byte past an
    element boundary (as np.frombuffer(buf, offset=1) gives)."""
    buf = bytearray(a.nbytes + a.itemsize)
    np.ndarray(a.shape, dtype=a.dtype, buffer=buf, offset=1)[...] = a
    m = np.frombuffer(buf, dtype=a.dtype, offset=1, count=a.size).reshape(a.shape)
    assert m.flags.c_contiguous and not m.flags.aligned and m.ctypes.data % a.itemsize
    return m


def writable_misaligned(a):
    buf = bytearray(a.nbytes + a.itemsize)
    m = np.ndarray(a.shape, dtype=a.dtype, buffer=buf, offset=1)
    m[...] = a
    assert m.flags.c_contiguous and m.flags.writeable and m.ctypes.data % a.itemsize
    return m


# ------------------------------------------------------------- misaligned arrays


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_misaligned_input_is_copied(which):
    q, k, v = qkv()
    want = stsa.attention(q, k, v, layout="bshd")
    args = dict(q=q, k=k, v=v)
    args[which] = misaligned(args[which])
    got = stsa.attention(**args, layout="bshd")
    np.testing.assert_array_equal(got, want)


def test_misaligned_input_of_sparse_attention_and_svg_is_copied():
    g = stsa.Geometry(2, 3, 4)
    q, k, v = qkv()
    want = stsa.sparse_attention(q, k, v, layout="bshd", mask=masks.causal())
    got = stsa.sparse_attention(misaligned(q), misaligned(k), misaligned(v), layout="bshd",
                                mask=masks.causal())
    np.testing.assert_array_equal(got, want)
    want, _ = stsa.SVG(g)(q, k, v, layer=1, step=1, layout="bshd")
    got, _ = stsa.SVG(g)(misaligned(q), k, misaligned(v), layer=1, step=1, layout="bshd")
    np.testing.assert_array_equal(got, want)


def test_misaligned_out_is_refused_naming_the_alignment():
    q, k, v = qkv()
    out = writable_misaligned(np.zeros(SHAPE, np.float32))
    with pytest.raises(ValueError, match=r"^out: data pointer 0x[0-9a-f]+ is not aligned to "
                                         r"its 4-byte float32 elements") as e:
        stsa.attention(q, k, v, layout="bshd", out=out)
    assert "stride" not in str(e.value)
    assert not out.any()  # nothing written


# ------------------------------------------------------------- pickle and copy


def _native_objects():
    g = stsa.Geometry(2, 3, 4)
    return {"Context": stsa.Context(), "SVG": stsa.SVG(g), "SVG2": stsa.SVG2(g),
            "Plan": stsa.Plan(masks.causal(), 24, heads=2), "Mask": masks.causal()}


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_native_objects_cannot_be_pickled_or_copied(how):
    do = {"pickle": pickle.dumps, "copy": copy.copy, "deepcopy": copy.deepcopy}[how]
    for name, obj in _native_objects().items():
        with pytest.raises(TypeError, match=rf"^cannot pickle or copy an stsa\.{name}: it "
                                            r"owns native state .*create a new one") as e:
            do(obj)
        assert "cffi" not in str(e.value) and "RLock" not in str(e.value)
        if how != "copy":  # a shallow copy of a list does not copy its items
            with pytest.raises(TypeError, match=rf"stsa\.{name}"):
                do([obj])


def test_a_copied_mask_no_longer_outlives_its_original():
    # copy.copy used to share the C handle, freed with the original (use after free)
    m = masks.causal()
    with pytest.raises(TypeError):
        copy.copy(m)
    assert m.keep(0, 0) and not m.keep(0, 1)


def test_value_objects_still_pickle():
    g = stsa.Geometry(2, 3, 4, text=5, text_pos="prefix")
    assert pickle.loads(pickle.dumps(g)) == g and copy.deepcopy(g) == g


# ------------------------------------------------------------- 0 meaning "default"


def test_svg2_top_p_0_is_refused_not_a_key_budget():
    g = stsa.Geometry(2, 3, 4)
    with pytest.raises(ValueError, match=r"^stsa\.SVG2: top_p = 0 .*density=") as e:
        stsa.SVG2(g, top_p=0)
    assert isinstance(e.value, stsa.Error)
    with pytest.raises(ValueError, match=r"^stsa\.SVG2: top_p = 0\.0 "):
        stsa.SVG2(g, top_p=0.0, density=0.3)
    # the key budget is asked for with density= (top_p None or left out)
    assert stsa.SVG2(g, density=0.3).config.svg2.top_p == 0
    assert stsa.SVG2(g, top_p=None, density=0.3).config.svg2.top_p == 0


@pytest.mark.parametrize("name", ["q_clusters", "kv_clusters", "kmeans_iters_cold",
                                  "kmeans_iters_warm", "min_kv_fraction", "q_tile",
                                  "kv_tile"])
def test_svg2_zero_that_the_library_reads_as_default_is_refused(name):
    g = stsa.Geometry(2, 3, 4)
    with pytest.raises(ValueError, match=rf"^stsa\.SVG2: {name} = 0 .*{name}=None"):
        stsa.SVG2(g, **{name: 0})
    stsa.SVG2(g, **{name: None})


@pytest.mark.parametrize("name", ["q_tile", "kv_tile"])
def test_svg_and_plan_tile_0_is_refused(name):
    with pytest.raises(ValueError, match=rf"^stsa\.SVG: {name} = 0 .*{name}=None"):
        stsa.SVG(stsa.Geometry(2, 3, 4), **{name: 0})
    with pytest.raises(ValueError, match=rf"^stsa\.Plan: {name} = 0 .*{name}=None"):
        stsa.Plan(masks.causal(), 24, heads=2, **{name: 0})


# ------------------------------------------------------------- floats as given


@pytest.mark.parametrize("scale, words", [
    (1e300, "1e+300 is too large"), (-1e300, "-1e+300 must be a positive finite"),
    (1e-300, "1e-300 is too small"), (-1e-50, "-1e-50 must be a positive finite"),
    (3.5e38, "3.5e+38 is too large"), (np.float64(1e39), "1e+39 is too large")])
def test_scale_that_float32_cannot_hold_is_named_as_given(scale, words):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="^" + re.escape(f"scale = {words}")) as e:
        stsa.attention(q, k, v, layout="bshd", scale=scale)
    assert "inf" not in str(e.value) and isinstance(e.value, stsa.Error)
    with pytest.raises(ValueError, match="^" + re.escape(f"scale = {words}")):
        stsa.sparse_attention(q, k, v, layout="bshd", scale=scale, mask=masks.causal())
    # what float32 does hold goes through
    stsa.attention(q, k, v, layout="bshd", scale=3.4e38)
    stsa.attention(q, k, v, layout="bshd", scale=1e-44)


@pytest.mark.parametrize("scale", ["0.5", b"1", True, 1j, [0.5], object()])
def test_scale_that_is_no_real_number_is_a_type_error(scale):
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"^scale must be a real number, got "):
        stsa.attention(q, k, v, layout="bshd", scale=scale)


def test_huge_integer_floats_are_named():
    g = stsa.Geometry(2, 3, 4)
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"^scale = 1000000000000000000000.*\(401 digits\)"):
        stsa.attention(q, k, v, layout="bshd", scale=10**400)
    with pytest.raises(ValueError, match=r"^stsa\.SVG: density = 10000.*\(401 digits\)"):
        stsa.SVG(g, density=10**400)


@pytest.mark.parametrize("cls, name, value, words", [
    ("SVG", "density", 1.0000001, "1.0000001 is the KEPT fraction and must be in (0, 1]"),
    ("SVG", "density", 0, "0 is the KEPT fraction and must be in (0, 1]"),
    ("SVG", "density", float("nan"), "nan is the KEPT fraction"),
    ("SVG", "max_error", -1e-9, "-1e-09, expected 0 (no budget) or a positive"),
    ("SVG", "max_error", math.inf, "inf, expected 0 (no budget) or a positive"),
    ("SVG2", "top_p", 1.0000001, "1.0000001, expected a probability in (0, 1]"),
    ("SVG2", "top_p", -1e-9, "-1e-09, expected a probability in (0, 1]"),
    ("SVG2", "min_kv_fraction", 1.0000001, "1.0000001, expected a fraction in (0, 1]"),
])
def test_float_settings_are_checked_and_named_as_given(cls, name, value, words):
    g = stsa.Geometry(2, 3, 4)
    with pytest.raises(ValueError, match="^" + re.escape(f"stsa.{cls}: {name} = {words}")) as e:
        getattr(stsa, cls)(g, **{name: value})
    assert isinstance(e.value, stsa.Error)


@pytest.mark.parametrize("value", ["0.5", [0.5], True, 1j])
@pytest.mark.parametrize("name", ["density", "max_error"])
def test_float_settings_that_are_no_numbers_are_type_errors(name, value):
    with pytest.raises(TypeError, match=rf"^stsa\.SVG: {name} must be a real number, got"):
        stsa.SVG(stsa.Geometry(2, 3, 4), **{name: value})


@pytest.mark.parametrize("value, err, words", [
    (1.0000001, None, None), (float("nan"), ValueError, "nan, expected >= 0"),
    (math.inf, ValueError, "inf, expected >= 0"), ("0.1", TypeError, None),
    ([0.1], TypeError, None)])
def test_a_calls_max_error_is_checked_and_named(value, err, words):
    q, k, v = qkv()
    svg = stsa.SVG(stsa.Geometry(2, 3, 4))
    if err is None:
        svg(q, k, v, layout="bshd", max_error=value)
        return
    with pytest.raises(err, match=r"^stsa\.SVG: max_error" + (f" = {words}" if words
                                                               else " must be a real")):
        svg(q, k, v, layout="bshd", max_error=value)


# ------------------------------------------------------------- layer and step


@pytest.mark.parametrize("name", ["layer", "step"])
@pytest.mark.parametrize("value", [2**63, 2**64, 2**200, -1, -(2**63) - 1])
def test_layer_and_step_out_of_range(name, value):
    q, k, v = qkv()
    svg = stsa.SVG2(stsa.Geometry(2, 3, 4))
    with pytest.raises(ValueError, match=rf"^{name} = {value} is out of range "
                                         rf"\[0, 9223372036854775807\]") as e:
        svg(q, k, v, layout="bshd", **{name: value})
    assert isinstance(e.value, stsa.Error)
    with pytest.raises(TypeError, match=rf"^{name} must be an integer, got float"):
        svg(q, k, v, layout="bshd", **{name: 1.0})


# ------------------------------------------------------------- other abuses


def test_choices_that_are_not_strings():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"^layout \['bshd'\] is not one of"):
        stsa.attention(q, k, v, layout=["bshd"])
    with pytest.raises(ValueError, match=r"^mode \[1\] is not one of"):
        stsa.sparse_attention(q, k, v, layout="bshd", mask=masks.full(), mode=[1])
    with pytest.raises(ValueError, match=r"^q_order \[1\] is not one of"):
        stsa.sparse_attention(q, k, v, layout="bshd", mask=masks.full(), q_order=[1])
    with pytest.raises(ValueError, match=r"^order \['native'\] is not one of"):
        stsa.permute_tokens(q, stsa.Geometry(2, 3, 4), ["native"], layout="bshd")
    with pytest.raises(ValueError, match=r"^text_pos \['prefix'\] is not one of"):
        stsa.Geometry(1, 1, 1, text=1, text_pos=["prefix"])
    with pytest.raises(ValueError, match=r"^unknown parameter \['threads'\]"):
        stsa.Context().set(["threads"], 1)
    with pytest.raises(ValueError, match=r"^unknown parameter \['threads'\]"):
        stsa.Context().get(["threads"])


def test_objects_of_the_wrong_type_are_named():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"^out must be a numpy array or a CPU torch tensor, "
                                        r"got list"):
        stsa.attention(q, k, v, layout="bshd", out=[1])
    with pytest.raises(TypeError, match=r"^out must be a numpy array"):
        stsa.SVG(stsa.Geometry(2, 3, 4))(q, k, v, layout="bshd", out=[1])
    with pytest.raises(TypeError, match=r"^ctx must be an stsa\.Context, got int"):
        stsa.attention(q, k, v, layout="bshd", ctx=1)
    with pytest.raises(TypeError, match=r"^ctx must be an stsa\.Context, got int"):
        stsa.attention(q, k, v, layout="bshd", ctx=0)
    with pytest.raises(TypeError, match=r"geometry must be an stsa\.Geometry or a preset "
                                        r"name, got int"):
        stsa.sparse_attention(q, k, v, layout="bshd", mask=masks.full(), geometry=1)
    with pytest.raises(TypeError, match=r"geometry must be an stsa\.Geometry or a preset"):
        stsa.permute_tokens(q, 1, "native", layout="bshd")
    with pytest.raises(TypeError, match=r"^Plan: masks must be a Mask or a non-empty list"):
        stsa.Plan(None, 24)
    with pytest.raises(TypeError, match=r"^Plan: masks must be a Mask or a non-empty list"):
        stsa.sparse_attention(q, k, v, layout="bshd", mask=1)
    with pytest.raises(TypeError, match=r"^equals: other must be an stsa\.Mask, got int"):
        masks.full().equals(1)
    with pytest.raises(TypeError, match=r"^a preset name must be a str, got bytes"):
        stsa.preset_config(b"wan21-480p")
    with pytest.raises(ValueError, match=r"unknown SVG preset 'wan21-480p\\x00'"):
        stsa.Geometry.preset("wan21-480p\0")


def test_plan_heads_are_checked():
    with pytest.raises(ValueError, match=r"^heads = 9223372036854775808 is out of range "
                                         r"\[1, "):
        stsa.Plan(masks.full(), 24, heads=2**63)
    with pytest.raises(TypeError, match=r"^heads must be an integer, got float"):
        stsa.Plan(masks.full(), 24, heads=1.5)
    with pytest.raises(ValueError, match=r"^heads = 0 is out of range \[1, "):
        stsa.Plan(masks.full(), 24, heads=0)


def test_mask_arguments_are_checked():
    with pytest.raises(ValueError, match=r"^s_q = -1 is out of range \[0, "):
        masks.full().to_dense(-1)
    with pytest.raises(TypeError, match=r"^s_kv must be an integer, got float"):
        masks.full().to_dense(2, 1.5)
    with pytest.raises(TypeError, match=r"^segments: q_seg must be integers, got <U1"):
        masks.segments(["a"])
    with pytest.raises(TypeError, match=r"^segments: k_seg must be integers, got float64"):
        masks.segments([1, 2], [1.5, 2.0])
    with pytest.raises(ValueError, match=r"^segments: q_seg holds 1099511627776, outside "
                                         r"int32"):
        masks.segments([1, 2**40])
    with pytest.raises(ValueError, match=r"^segments: q_seg is empty"):
        masks.segments([])
    with pytest.raises(ValueError, match=r"^dense: the mask is empty \(shape \(0, 3\)\)"):
        masks.dense(np.zeros((0, 3), bool))
    m = masks.segments(np.array([1, 1, 2], np.int64))
    assert m.keep(0, 1) and not m.keep(0, 2)


def test_from_video_arguments_are_checked():
    with pytest.raises(TypeError, match=r"^height must be an integer, got str"):
        stsa.Geometry.from_video("480", 832, 81)
    with pytest.raises(ValueError, match=r"^patch_size = \(0, 0, 0\): every patch size must "
                                         r"be >= 1"):
        stsa.Geometry.from_video(480, 832, 81, patch_size=(0, 0, 0))
    with pytest.raises(ValueError, match=r"^vae_scale_spatial = 0 is out of range \[1, "):
        stsa.Geometry.from_video(480, 832, 81, vae_scale_spatial=0)


def test_workload_arguments_are_checked():
    g = stsa.Geometry(2, 3, 4)
    for name in ("heads", "head_dim", "batch"):
        args = dict(heads=2, head_dim=8, batch=1)
        args[name] = -1
        with pytest.raises(ValueError, match=rf"^{name} = -1 is out of range \[1, "):
            stsa.workload(g, **args)
    # the kernels' limit on D, named (the library's own message is "invalid shape")
    with pytest.raises(ValueError, match=r"^head_dim = 513 is out of range \[1, 512\]"):
        stsa.workload(g, 2, 513)
    with pytest.raises(MemoryError, match=r"^stsa\.workload: q, k and v of shape "
                                          r"\(1, 24, 1099511627776, 512\)"):
        stsa.workload(g, 2**40, 512)


def test_closed_objects_say_so():
    ctx = stsa.Context()
    ctx.close()
    ctx.close()
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"^stsa\.Context is closed"):
        stsa.attention(q, k, v, layout="bshd", ctx=ctx)
    svg = stsa.SVG2(stsa.Geometry(2, 3, 4))
    svg.close()
    svg.close()
    with pytest.raises(ValueError, match=r"^stsa\.SVG session is closed"):
        svg(q, k, v, layout="bshd")
    with pytest.raises(ValueError, match=r"^stsa\.SVG session is closed"):
        svg.windows
    assert repr(ctx) == "stsa.Context(closed)"


def test_misaligned_torch_input_is_copied():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(a) for a in qkv())
    want = stsa.attention(q, k, v, layout="bshd")
    buf = bytearray(q.numel() * 4 + 4)
    try:
        m = torch.frombuffer(buf, dtype=torch.float32, offset=1, count=q.numel())
    except (ValueError, RuntimeError) as e:  # a torch that refuses to make one
        pytest.skip(f"torch makes no misaligned tensor: {e}")
    m = m.reshape(q.shape)
    m.copy_(q)
    assert m.data_ptr() % 4 and m.is_contiguous()
    torch.testing.assert_close(stsa.attention(m, k, v, layout="bshd"), want, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^out: data pointer 0x[0-9a-f]+ is not aligned"):
        stsa.attention(q, k, v, layout="bshd", out=m)
