"""The ctypes mirror of include/stsa.h: struct layouts, signatures, loading."""

import ctypes
import pathlib
import shutil
import subprocess

import pytest

import stsa
from stsa import _lib

# LP64 (x86-64 / AArch64 Linux) layout of every struct, written out from the
# header: (sizeof, {field: offset}). C enums are 4-byte ints.
LAYOUT = {
    "Tensor": ("stsa_tensor", 80, {"data": 0, "dtype": 8, "shape": 16, "stride": 48}),
    "AttnOpts": ("stsa_attn_opts", 16, {"scale": 0, "lse": 8}),
    "Geometry": ("stsa_geometry", 48, {"frames": 0, "height": 8, "width": 16, "text": 24,
                                       "text_real": 32, "text_pos": 40}),
    "PlanDesc": ("stsa_plan_desc", 72, {"s_q": 0, "s_kv": 8, "heads": 16, "masks": 24,
                                        "geometry": 32, "q_order": 40, "kv_order": 44,
                                        "q_tile": 48, "kv_tile": 52, "flags": 56,
                                        "q_rows": 64}),
    "PlanStats": ("stsa_plan_stats", 72, {"q_tiles": 0, "kv_tiles": 8, "tiles_total": 16,
                                          "tiles_active": 24, "tiles_partial": 32,
                                          "pairs_total": 40, "pairs_kept": 48,
                                          "distinct_masks": 56, "distinct_partials": 64}),
    "SparseOpts": ("stsa_sparse_opts", 40, {"scale": 0, "lse": 8, "mode": 16,
                                            "pairs_changed": 24, "flags": 32}),
    "WorkloadDesc": ("stsa_workload_desc", 88, {"geometry": 0, "batch": 48, "heads": 56,
                                                "head_dim": 64, "seed": 72, "kinds": 80}),
    "SvgConfig": ("stsa_svg_config", 136, {"geometry": 0, "heads": 48, "head_dim": 56,
                                           "density": 64, "dense_steps": 72,
                                           "dense_layers": 80, "sample_rows": 88,
                                           "sink_frames": 96, "seed": 104, "steps": 112,
                                           "layers": 120, "q_tile": 128, "kv_tile": 132}),
    "SvgWindows": ("stsa_svg_windows", 40, {"q_tile": 0, "kv_tile": 4, "frame_window": 8,
                                            "band": 16, "density_spatial": 24,
                                            "density_temporal": 32}),
    "SvgReport": ("stsa_svg_report", 56, {"dense": 0, "kinds": 8, "mse_spatial": 16,
                                          "mse_temporal": 24, "profile_ms": 32,
                                          "attention_ms": 40, "density": 48}),
}


def _ctypes_layout(name):
    cls = getattr(_lib, name)
    return ctypes.sizeof(cls), {f: getattr(cls, f).offset for f, _ in cls._fields_}


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="LP64 table")
@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_struct_layout_lp64(name):
    _, size, offsets = LAYOUT[name]
    assert _ctypes_layout(name) == (size, offsets)


def _header():
    root = pathlib.Path(__file__).resolve().parents[2]
    header = root / "include" / "stsa.h"
    return header if header.is_file() else None


@pytest.mark.skipif(_header() is None or shutil.which("cc") is None,
                    reason="needs include/stsa.h (a source checkout) and a C compiler")
def test_struct_layout_against_header(tmp_path):
    """Compiles offsetof/sizeof of every mirrored struct from the real header,
    so a field added in C without the binding fails here."""
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "stsa.h"',
             'int main(void) {']
    for name, (cname, _, offsets) in LAYOUT.items():
        lines.append(f'  printf("{name} size %zu\\n", sizeof({cname}));')
        for field in offsets:
            lines.append(f'  printf("{name} {field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-I", str(_header().parent), str(src), "-o", str(exe)],
                   check=True)
    got = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, field, value = line.split()
        got.setdefault(name, {})[field] = int(value)
    for name in LAYOUT:
        size, offsets = _ctypes_layout(name)
        assert got[name].pop("size") == size, name
        assert got[name] == offsets, name


@pytest.mark.skipif(_header() is None, reason="needs include/stsa.h (a source checkout)")
def test_every_header_function_is_declared():
    import re
    names = set(re.findall(r"STSA_API[^;(]*?\b(stsa_\w+)\s*\(", _header().read_text()))
    assert names and names == set(_lib.SIGNATURES)


def test_struct_returned_by_value_matches():
    # stsa_tensor_bhsd returns an stsa_tensor by value: C fills it, ctypes reads it
    t = _lib.lib.stsa_tensor_bhsd(1024, _lib.STSA_F16, 2, 5, 3, 7)
    assert t.data == 1024 and t.dtype == _lib.STSA_F16
    assert list(t.shape) == [2, 5, 3, 7]
    assert list(t.stride) == [3 * 5 * 7, 7, 5 * 7, 1]


def test_preset_config_fields_read_back():
    cfg = stsa.preset_config("wan21-720p")
    assert (cfg.geometry.frames, cfg.geometry.height, cfg.geometry.width) == (21, 45, 80)
    assert (cfg.heads, cfg.head_dim, cfg.steps, cfg.layers) == (40, 128, 50, 40)
    assert cfg.density == pytest.approx(0.30)
    assert (cfg.sample_rows, cfg.sink_frames, cfg.q_tile, cfg.kv_tile) == (64, 1, 0, 0)
    hv = stsa.preset_config("hunyuan-720p").geometry
    assert (hv.text, hv.text_real, hv.text_pos) == (256, 256, 2)


def test_geometry_tokens_through_c():
    g = stsa.Geometry(3, 4, 5, text=7, text_pos="prefix")
    assert g.tokens == 7 + 3 * 4 * 5


def test_every_function_has_argtypes_and_restype():
    for name, (restype, argtypes) in _lib.SIGNATURES.items():
        fn = getattr(_lib.lib, name)
        assert fn.argtypes == argtypes and fn.restype == restype, name


def test_loaded_with_cdll_so_the_gil_is_released():
    # ctypes.PyDLL would keep the GIL during calls; CDLL releases it
    assert type(_lib.lib) is ctypes.CDLL
    assert not isinstance(_lib.lib, ctypes.PyDLL)
    assert stsa.library_version.count(".") == 2
    assert pathlib.Path(stsa.library_path).is_file()


def test_status_names():
    assert _lib.status_name(_lib.STSA_ERR_BAD_SHAPE)
    assert len(_lib.STATUS_NAMES) == 15


def _import_with(env_value):
    import os
    import sys
    env = dict(os.environ, STSA_LIBRARY=env_value)
    return subprocess.run([sys.executable, "-c", "import stsa; print(stsa.library_path)"],
                          env=env, capture_output=True, text=True, cwd="/")


def test_stsa_library_variable_wins():
    path = stsa.library_path
    got = _import_with(path)
    assert got.returncode == 0 and got.stdout.strip() == path


def test_stsa_library_variable_that_does_not_load_is_an_error():
    got = _import_with("/nonexistent/libstsa.so")
    assert got.returncode != 0
    assert "cannot load $STSA_LIBRARY=/nonexistent/libstsa.so" in got.stderr
