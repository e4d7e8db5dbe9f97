"""The binding's ABI is include/stsa.h and include/stsa_io.h: properties,
not a copy of them.

Every STSA_API function of a header resolves in its library (libstsa,
libstsa_io) with the header's arity; struct layouts, enum values and integer macros seen by
Python equal what the C compiler makes of the same header; struct `size`
fields are filled; library loading and the GIL."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

import cffi
import numpy as np
import pytest

import stsa
from stsa import _header, _lib
from stsa._lib import ffi, io_ffi, io_lib, lib

CHECKOUT_HEADER = pathlib.Path(__file__).resolve().parents[2] / "include" / "stsa.h"
CHECKOUT_IO_HEADER = CHECKOUT_HEADER.with_name("stsa_io.h")
# a function of the header: STSA_API <type> name(<params>);
EXPORTED = re.compile(r"STSA_API\s[^;(]*?\b(stsa_\w+)\s*\(([^;]*?)\)\s*;", re.S)


def _arity(params):
    """Parameters in a C parameter list: top-level commas + 1; (void): 0."""
    params = re.sub(r"/\*.*?\*/", " ", params, flags=re.S).strip()
    if params in ("", "void"):
        return 0
    depth, commas = 0, 0
    for c in params:
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(c, 0)
        commas += c == "," and depth == 0
    return commas + 1


def _exported(header):
    return {name: _arity(params) for name, params in EXPORTED.findall(header.read_text())}


def test_every_header_function_is_callable_through_the_binding():
    exported = _exported(_lib.header_path)
    assert len(exported) > 50 and set(exported) == set(_lib.FUNCTIONS)
    for name, arity in exported.items():
        fn_type = ffi.typeof(getattr(lib, name))
        assert fn_type.kind == "function" and len(fn_type.args) == arity, name


def test_every_io_header_function_is_callable_through_the_binding():
    """stsa_io.h's functions (its experimental workload included) resolve in
    libstsa_io, none of them in libstsa: the file formats left libstsa."""
    exported = _exported(_lib.io_header_path)
    assert {"stsa_st_open", "stsa_npy_read", "stsa_workload_generate"} <= set(exported)
    assert set(exported) == set(_lib.IO_FUNCTIONS)
    assert not set(exported) & set(_lib.FUNCTIONS)
    # the workload is experimental: declared only with STSA_EXPERIMENTAL
    plain = _header.cdef_source(_lib.io_header_path.read_text(),
                                included=(_lib.header_path.read_text(),))
    assert "stsa_st_open" in plain and "stsa_workload_generate" not in plain
    for name, arity in exported.items():
        fn_type = io_ffi.typeof(getattr(io_lib, name))
        assert fn_type.kind == "function" and len(fn_type.args) == arity, name


def test_the_experimental_api_is_declared_only_with_its_macro():
    """The header's experimental section is behind STSA_EXPERIMENTAL; the
    binding predefines it, so Python has both APIs from the header alone."""
    text = _lib.header_path.read_text()
    stable = _header.cdef_source(text)
    every = _header.cdef_source(text, predefined=_lib.PREDEFINED)
    for name in ("stsa_tensor_copy", "stsa_plan_head_stats",
                 "stsa_svg_kind_mask", "stsa_svg_sampled_rows"):
        assert name in _lib.FUNCTIONS and f"{name}(" in every and f"{name}(" not in stable
    assert "stsa_attention(" in stable and "stsa_backend_available(" in stable


@pytest.mark.skipif(not CHECKOUT_HEADER.is_file(), reason="needs a source checkout")
def test_the_header_read_is_the_checkouts():
    """An installed package reads the stsa.h it shipped with: stale when the
    checkout's header changed since (reinstall: pip install ./python)."""
    assert _lib.header_path.read_text() == CHECKOUT_HEADER.read_text(), \
        f"{_lib.header_path} differs from {CHECKOUT_HEADER}: reinstall the package"
    assert _lib.io_header_path.read_text() == CHECKOUT_IO_HEADER.read_text(), \
        f"{_lib.io_header_path} differs from {CHECKOUT_IO_HEADER}: reinstall the package"


def _public_structs():
    """C spelling -> ctype of every struct with a layout (not opaque), of
    both headers (io_ffi includes ffi)."""
    found = {}
    for the_ffi in (ffi, io_ffi):
        typedefs, tags, _ = the_ffi.list_types()
        for spelling in typedefs + [f"struct {t}" for t in tags if not t.startswith("$")]:
            _add_struct(found, the_ffi.typeof(spelling), spelling)
    return found


def _add_struct(found, ctype, spelling):
    if ctype.kind == "struct" and ctype.fields is not None and ctype not in found.values():
        found[spelling] = ctype


def _constants():
    """Enum values and integer macros of the cdef: name -> value."""
    found = {name: getattr(lib, name) for name in dir(lib) if name not in _lib.FUNCTIONS}
    found.update({name: getattr(io_lib, name) for name in dir(io_lib)
                  if name not in _lib.IO_FUNCTIONS})
    return found


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """What cc makes of the binding's header: {("size", T): n, ("offset", T,
    f): n, ("fsize", T, f): n, ("value", NAME): n}."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler (cc)")
    lines = ["#define STSA_EXPERIMENTAL", "#include <stdio.h>", "#include <stddef.h>",
             '#include "stsa.h"', '#include "stsa_io.h"', "int main(void) {"]
    for spelling, ctype in _public_structs().items():
        lines.append(f'  printf("size|{spelling}|%zu\\n", sizeof({spelling}));')
        for field, _ in ctype.fields:
            lines.append(f'  printf("offset|{spelling}|{field}|%zu\\n", '
                         f'offsetof({spelling}, {field}));')
            lines.append(f'  printf("fsize|{spelling}|{field}|%zu\\n", '
                         f'sizeof((({spelling} *)0)->{field}));')
    for name in _constants():
        lines.append(f'  if ((long long)({name}) < 0) printf("value|{name}|%lld\\n", '
                     f'(long long)({name}));')
        lines.append(f'  else printf("value|{name}|%llu\\n", '
                     f'(unsigned long long)({name}));')
    for spelling in io_ffi.list_types()[0] + ffi.list_types()[0]:
        if io_ffi.typeof(spelling).kind == "enum":
            lines.append(f'  printf("size|{spelling}|%zu\\n", sizeof({spelling}));')
    lines += ["  return 0;", "}"]
    tmp = tmp_path_factory.mktemp("abi")
    (tmp / "layout.c").write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", str(_lib.header_path.parent), str(tmp / "layout.c"),
                    "-o", str(tmp / "layout")], check=True)
    out = subprocess.run([str(tmp / "layout")], check=True, capture_output=True, text=True)
    got = {}
    for line in out.stdout.splitlines():
        *key, value = line.split("|")
        got[tuple(key)] = int(value)
    return got


def test_struct_layouts_equal_the_c_compilers(compiled):
    structs = _public_structs()
    assert {"stsa_tensor", "stsa_attn_opts", "stsa_svg_config", "stsa_svg2_config",
            "stsa_io_tensor", "stsa_workload_desc"} <= set(structs)
    for spelling, ctype in structs.items():
        assert ffi.sizeof(ctype) == compiled[("size", spelling)], spelling
        for field, f in ctype.fields:
            assert f.offset == compiled[("offset", spelling, field)], (spelling, field)
            assert ffi.sizeof(f.type) == compiled[("fsize", spelling, field)], (spelling, field)


def test_enum_values_and_macros_equal_the_c_compilers(compiled):
    constants = _constants()
    assert constants["STSA_ERR_BAD_SHAPE"] == 2 and constants["STSA_UNBOUNDED"] == -(2**63)
    for name, value in constants.items():
        assert value == compiled[("value", name)], name
    for spelling in ffi.list_types()[0]:
        if ffi.typeof(spelling).kind == "enum":
            assert ffi.sizeof(spelling) == compiled[("size", spelling)], spelling


def test_python_names_of_enums_are_the_librarys():
    assert [_lib.string(lib.stsa_backend_name(v)) for v in _lib.BACKENDS.values()] == \
        list(_lib.BACKENDS)
    assert {"auto", "ref", "portable"} <= set(_lib.BACKENDS)
    assert _lib.SPARSE_MODES == {"exact": lib.STSA_SPARSE_EXACT, "naive": lib.STSA_SPARSE_NAIVE,
                                 "tile-rounded": lib.STSA_SPARSE_TILE_ROUNDED}
    assert _lib.PARAMS["check_finite"] == lib.STSA_PARAM_CHECK_FINITE
    assert _lib.ORDERS["position_major"] == lib.STSA_ORDER_POSITION_MAJOR
    assert _lib.TEXT_POS["suffix"] == lib.STSA_TEXT_SUFFIX
    assert _lib.HEAD_KINDS[lib.STSA_HEAD_TEMPORAL] == "temporal"
    assert "STSA_PARAM_COUNT_" not in _lib.enum_values("stsa_param")


def test_backends_are_the_librarys_table():
    """stsa.backends() is the library's table: every value of the header's
    enum, in its order, each name read back by the library and accepted by a
    Context where this machine runs it, refused as unsupported elsewhere."""
    table = stsa.backends()
    assert list(table) == list(_lib.BACKENDS)
    assert [_lib.BACKENDS[name] for name in table] == sorted(
        _lib.enum_values("stsa_backend").values())
    here = stsa.backends(here=True)
    assert {"auto", "ref", "portable"} <= set(here) <= set(table)
    for name, about in table.items():
        assert isinstance(about, str) and len(about) > 8 and "\n" not in about, name
        assert lib.stsa_backend_from_name(name.encode()) == _lib.BACKENDS[name]
        if name in here:
            assert stsa.Context(threads=1, backend=name).backend in here
        else:
            with pytest.raises(stsa.Error, match="not available|does not run|unsupported"):
                stsa.Context(threads=1, backend=name)
    assert lib.stsa_backend_from_name(b"gpu") == -1


def test_every_status_has_a_distinct_name():
    names = [_lib.status_name(v) for v in _lib.enum_values("stsa_status").values()]
    assert len(names) >= 15 and all(names) and len(set(names)) == len(names)


SIZED = """
typedef struct inner { size_t size; int a; } inner;
typedef struct opts { size_t size; double x; inner in; } opts;
typedef struct plain { int n; size_t size; } plain;
"""


def test_new_sets_leading_size_fields_to_the_struct_size():
    test_ffi = cffi.FFI()
    test_ffi.cdef(SIZED)
    p = test_ffi.new("opts *")
    _lib.fill_sizes(test_ffi, p)
    assert p.size == test_ffi.sizeof("opts") and p.x == 0
    assert getattr(p, "in").size == test_ffi.sizeof("inner")
    q = test_ffi.new("plain *")
    _lib.fill_sizes(test_ffi, q)
    assert q.size == 0  # only a leading size_t size is the struct's version
    # and the header's own structs, whichever of them has such a field
    for spelling, ctype in _public_structs().items():
        first = ctype.fields[0]
        if first[0] == "size" and first[1].type.cname == "size_t":
            assert _lib.new(spelling).size == ffi.sizeof(ctype), spelling


def test_struct_returned_by_value_matches():
    # stsa_tensor_bhsd returns an stsa_tensor by value: C fills it, cffi reads it
    t = lib.stsa_tensor_bhsd(ffi.cast("void *", 1024), lib.STSA_F16, 2, 5, 3, 7)
    assert _lib.address(t.data) == 1024 and t.dtype == lib.STSA_F16
    assert list(t.shape) == [2, 5, 3, 7]
    assert list(t.stride) == [3 * 5 * 7, 7, 5 * 7, 1]


def test_preset_config_fields_read_back():
    cfg = stsa.preset_config("wan21-720p")
    assert (cfg.geometry.frames, cfg.geometry.height, cfg.geometry.width) == (21, 45, 80)
    assert (cfg.heads, cfg.head_dim, cfg.steps, cfg.layers) == (40, 128, 50, 40)
    assert cfg.density == pytest.approx(0.30)
    assert (cfg.sample_rows, cfg.sink_frames, cfg.q_tile, cfg.kv_tile) == (64, 1, 0, 0)
    hv = stsa.preset_config("hunyuan-720p").geometry
    assert (hv.text, hv.text_real, hv.text_pos) == (256, 256, lib.STSA_TEXT_SUFFIX)


def test_geometry_tokens_through_c():
    g = stsa.Geometry(3, 4, 5, text=7, text_pos="prefix")
    assert g.tokens == 7 + 3 * 4 * 5


def test_calls_release_the_gil():
    """While one thread is inside a long C call, another keeps running
    Python: it is never stalled for the length of the call."""
    q = np.ones((1, 768, 2, 64), dtype=np.float32)
    ctx = stsa.Context(threads=1, backend="ref")  # the slow reference: ~0.4 s
    inside = threading.Event()
    took = []

    def call():
        inside.set()
        t0 = time.perf_counter()
        stsa.attention(q, q, q, layout="bshd", ctx=ctx)
        took.append(time.perf_counter() - t0)

    worker = threading.Thread(target=call)
    worker.start()
    inside.wait()
    last, longest = time.perf_counter(), 0.0
    while worker.is_alive():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    assert took and longest < took[0] / 2, (longest, took)


def _run(code, env=None, cwd="/"):
    return subprocess.run([sys.executable, "-c", code], env=env or os.environ,
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_no_crash_at_interpreter_exit():
    # the library stays loaded until the process ends: unloading it (and
    # libgomp with it) under its idle worker threads crashed now and then
    code = ("import numpy as np, stsa; q = np.ones((1, 64, 2, 16), np.float32); "
            "stsa.attention(q, q, q, layout='bshd', threads=2)")
    for _ in range(12):
        got = _run(code)
        assert got.returncode == 0, got.stderr[-2000:]


@pytest.mark.parametrize("header, anchor", [
    ("stsa.h", "STSA_API unsigned stsa_version_number(void);"),
    ("stsa_io.h", "STSA_API void stsa_st_close(stsa_st_file *f);"),
])
def test_library_older_than_the_header_is_refused(tmp_path, header, anchor):
    """A header function its library lacks (libstsa's or libstsa_io's) fails
    the import, naming it."""
    package = pathlib.Path(stsa.__file__).resolve().parent
    copy = tmp_path / "stsa"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    (copy / "_lib").mkdir()
    shutil.copyfile(stsa.library_path, copy / "_lib" / "libstsa.so")
    shutil.copyfile(_lib.io_path, copy / "_lib" / "libstsa_io.so")
    bundled = package.parent / "stsa.libs"  # a manylinux wheel's libgomp and libjansson
    if bundled.is_dir():
        shutil.copytree(bundled, tmp_path / "stsa.libs")
    for name, path in (("stsa.h", _lib.header_path), ("stsa_io.h", _lib.io_header_path)):
        text = path.read_text()
        if name == header:
            assert anchor in text
            text = text.replace(anchor, anchor + "\nSTSA_API int stsa_not_there(void);")
        (copy / "_lib" / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "STSA_LIBRARY"}
    env["PYTHONPATH"] = str(tmp_path)
    got = _run("import stsa", env=env)
    assert got.returncode != 0 and "lacks stsa_not_there" in got.stderr, got.stderr[-2000:]
    assert f"of {copy / '_lib' / header}" in got.stderr, got.stderr[-2000:]


def _import_with(env_value):
    env = dict(os.environ, STSA_LIBRARY=env_value)
    return _run("import stsa; print(stsa.library_path)", env=env)


def test_stsa_library_variable_wins():
    path = stsa.library_path
    got = _import_with(path)
    assert got.returncode == 0 and got.stdout.strip() == path
    assert stsa.library_version.count(".") == 2
    assert pathlib.Path(stsa.library_path).is_file()


def test_stsa_library_variable_that_does_not_load_is_an_error():
    got = _import_with("/nonexistent/libstsa.so")
    assert got.returncode != 0
    assert "cannot load $STSA_LIBRARY=/nonexistent/libstsa.so" in got.stderr
