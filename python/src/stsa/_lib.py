"""cffi binding of libstsa and libstsa_io: include/stsa.h and
include/stsa_io.h declared as they are, the libraries opened in ABI mode.

Nothing of the C API is written out here: structs, function signatures,
enum values and integer macros all come from the header (see _header.py),
so the header stays the one description of the ABI. What this module adds
is loading, the Python names of enum values, and `new` (structs created
with their `size` field set). No array handling, no defaults: everything
above it (stsa.attention, stsa.Plan, ...) goes through `ffi` and `lib`.

Which headers are read (the ones shipped with the libraries), stsa.h and
stsa_io.h from the first folder that has stsa.h:
  1. stsa/_lib/, the copies `pip install` put next to libstsa.so;
  2. <source checkout>/include/, when the package is imported from
     python/src of a checkout.
Both are read with STSA_EXPERIMENTAL defined: the binding uses the
experimental sections too (stsa.workload is libstsa_io's generator).

Which libstsa is loaded (first match wins):
  1. $STSA_LIBRARY, a path to libstsa.so (an error if it cannot be loaded);
  2. the copy shipped inside the package, stsa/_lib/libstsa.so (pip install);
  3. <source checkout>/build/libstsa.so, when the package is imported from
     python/src of a checkout (development: `make build`, then
     PYTHONPATH=python/src).
libstsa_io.so is the one in the folder of the libstsa.so loaded; it needs
that libstsa, loaded first (`lib` for stsa.h's functions, `io_lib` for
stsa_io.h's, one set of types: io_ffi includes ffi).

cffi releases the GIL around every call into the library: other Python
threads go on during an attention call. The OpenMP runtime libstsa loads
starts with a passive wait policy unless the user chose one
(_wait_policy.py; threading_info says what applied).
"""

import os
import pathlib

import cffi

from . import _header, _wait_policy

HERE = pathlib.Path(__file__).resolve().parent
# python/src/stsa/_lib.py -> the repository root of a checkout is three levels up
CHECKOUT = HERE.parents[2]


# ------------------------------------------------------------------ the header
def _find_header():
    for path in (HERE / "_lib" / "stsa.h", CHECKOUT / "include" / "stsa.h"):
        if path.is_file():
            return path
    raise ImportError(
        f"stsa: stsa.h not found (neither {HERE / '_lib' / 'stsa.h'}, shipped by "
        f"`pip install ./python`, nor {CHECKOUT / 'include' / 'stsa.h'} of a source "
        "checkout); reinstall the package")


# Both headers' experimental sections (#ifdef STSA_EXPERIMENTAL) are declared
# (stsa.svg and the tests use them), as by a C file that defines the macro
# before it includes the headers.
PREDEFINED = ("STSA_EXPERIMENTAL",)
header_path = _find_header()
io_header_path = header_path.with_name("stsa_io.h")
ffi = cffi.FFI()
io_ffi = cffi.FFI()
try:
    ffi.cdef(_header.cdef_source(header_path.read_text(), predefined=PREDEFINED))
except (_header.HeaderError, cffi.CDefError) as e:
    raise ImportError(f"stsa: cannot declare {header_path}: {e}") from e
try:
    io_ffi.include(ffi)
    io_ffi.cdef(_header.cdef_source(io_header_path.read_text(), PREDEFINED,
                                    included=(header_path.read_text(),)))
except (OSError, _header.HeaderError, cffi.CDefError) as e:
    raise ImportError(f"stsa: cannot declare {io_header_path}: {e}") from e


# ------------------------------------------------------------------ loading
def _candidates():
    """(path, origin) pairs in the order they are tried."""
    env = os.environ.get("STSA_LIBRARY")
    if env:
        return [(pathlib.Path(env), "$STSA_LIBRARY")]
    found = [(HERE / "_lib" / "libstsa.so", "package")]
    if (CHECKOUT / "include" / "stsa.h").is_file():
        found.append((CHECKOUT / "build" / "libstsa.so", "source checkout"))
    return found


def _load():
    tried = []
    for path, origin in _candidates():
        if origin != "$STSA_LIBRARY" and not path.is_file():
            tried.append(f"{path} ({origin}: not there)")
            continue
        try:
            # NODELETE: never unloaded, not even when `lib` is collected at
            # interpreter exit, as libgomp's worker threads still run code
            # of the libraries it came with (a crash at exit otherwise);
            # the OpenMP runtime it loads starts with a passive wait policy
            with _wait_policy.passive_for_load() as load:
                handle = ffi.dlopen(str(path), ffi.RTLD_NOW | ffi.RTLD_NODELETE)
            return handle, path, _wait_policy.report(load, str(path))
        except OSError as e:
            if origin == "$STSA_LIBRARY":
                raise ImportError(f"stsa: cannot load $STSA_LIBRARY={path}: {e}") from e
            tried.append(f"{path} ({origin}: {e})")
    raise ImportError(
        "stsa: libstsa.so not found. Install the package with `pip install ./python` "
        "(it builds the library), set STSA_LIBRARY=/path/to/libstsa.so, or run "
        "`make build` in the source checkout. Tried: " + "; ".join(tried))


def _load_io(libstsa):
    """libstsa_io.so of the folder of `libstsa` (loaded after it: it needs
    libstsa, which the dynamic loader finds loaded by its soname)."""
    io_path = libstsa.with_name("libstsa_io.so")
    try:
        return io_ffi.dlopen(str(io_path), io_ffi.RTLD_NOW | io_ffi.RTLD_NODELETE), str(io_path)
    except OSError as e:
        raise ImportError(f"stsa: cannot load libstsa_io next to {libstsa}: {e} (build it "
                          "with libstsa: `make build`, or reinstall the package)") from e


def _functions(the_lib, the_path, the_header):
    """Names of a header's functions; ImportError if the library lacks one
    (cffi looks each symbol up when it is first used: here, all at once)."""
    names, missing = [], []
    for name in dir(the_lib):  # functions, enum values and integer macros of the cdef
        try:
            value = getattr(the_lib, name)
        except AttributeError:
            missing.append(name)
            continue
        if isinstance(value, ffi.CData) and ffi.typeof(value).kind == "function":
            names.append(name)
    if missing:
        raise ImportError(f"stsa: {the_path} lacks {', '.join(missing)} of {the_header}: "
                          "the library is older than the header (rebuild it, or set "
                          "STSA_LIBRARY to a build of this header)")
    return tuple(names)


lib, _libstsa_path, threading_info = _load()
path = str(_libstsa_path)
io_lib, io_path = _load_io(_libstsa_path)
version = ffi.string(lib.stsa_version_string()).decode()
_vnum = lib.stsa_version_number()
if _vnum // 10000 != lib.STSA_VERSION_MAJOR or (_vnum // 100) % 100 < lib.STSA_VERSION_MINOR:
    raise ImportError(f"stsa: {path} is version {version}; this binding "
                      f"({header_path}) needs {lib.STSA_VERSION_MAJOR}."
                      f"{lib.STSA_VERSION_MINOR}.x or a later minor version")
FUNCTIONS = _functions(lib, path, header_path)
IO_FUNCTIONS = _functions(io_lib, io_path, io_header_path)


# ------------------------------------------------------------------ enums
def enum_values(ctype):
    """name -> value of a header enum, without the *_COUNT_ sentinels."""
    return {name: value for name, value in ffi.typeof(ctype).relements.items()
            if not name.endswith("_")}


def enum_names(ctype, prefix, name_of=None):
    """Python name -> value of a header enum: the library's name of the
    value (name_of, e.g. lib.stsa_backend_name) where it has one, else the
    C name without `prefix`, lower case (STSA_ORDER_POSITION_MAJOR ->
    "position_major"); in the order of the values."""
    items = sorted(enum_values(ctype).items(), key=lambda item: item[1])
    if name_of is not None:
        return {string(name_of(value)): value for _, value in items}
    return {name[len(prefix):].lower(): value for name, value in items}


def address(p):
    """The address a C pointer holds, as an int."""
    return int(ffi.cast("uintptr_t", p))


def string(p):
    """A C string returned by the library as str (None for NULL)."""
    return None if p == ffi.NULL else ffi.string(p).decode(errors="replace")


# the library's table of backends (stsa_backend_count), name -> value
BACKENDS = {string(lib.stsa_backend_name(b)): b for b in range(lib.stsa_backend_count())}
PARAMS = enum_names("stsa_param", "STSA_PARAM_")
TEXT_POS = enum_names("stsa_text_pos", "STSA_TEXT_")
ORDERS = enum_names("stsa_order", "STSA_ORDER_")
# indexed by stsa_pv_precision value ("auto", "bf16", "near-f32", "f32")
PV_PRECISIONS = tuple(enum_names("stsa_pv_precision", "STSA_PV_",
                                 lib.stsa_pv_precision_name))
SPARSE_MODES = enum_names("stsa_sparse_mode", "STSA_SPARSE_", lib.stsa_sparse_mode_name)
# indexed by stsa_head_kind value
HEAD_KINDS = tuple(enum_names("stsa_head_kind", "STSA_HEAD_", lib.stsa_head_kind_name))
# indexed by stsa_budget_action value ("none", "raised", "dense", "policy")
BUDGET_ACTIONS = tuple(enum_names("stsa_budget_action", "STSA_BUDGET_",
                                  lib.stsa_budget_action_name))
# stsa_svg_method by name ("svg", "svg2", "auto")
SVG_METHODS = enum_names("stsa_svg_method", "STSA_SVG_METHOD_", lib.stsa_svg_method_name)
# indexed by stsa_auto_candidate value ("spatial", "temporal", "svg2", "dense")
AUTO_CANDIDATES = tuple(enum_names("stsa_auto_candidate", "STSA_AUTO_",
                                   lib.stsa_auto_candidate_name))
# indexed by stsa_auto_reason value
AUTO_REASONS = tuple(enum_names("stsa_auto_reason", "STSA_AUTO_", lib.stsa_auto_reason_name))


# ------------------------------------------------------------------ structs
def fill_sizes(the_ffi, p):
    """Sets the `size` field of struct *p, and of the structs inside it, to
    sizeof the struct: an extensible struct of the header starts with
    `size_t size`, which the caller sets so that the library knows which
    version of the struct it was given (the header's static inline `_init`
    helpers, which cffi cannot call, do the same)."""
    ctype = the_ffi.typeof(p)
    if ctype.kind == "pointer":
        ctype = ctype.item
    fields = ctype.fields or ()
    for i, (name, field) in enumerate(fields):
        if i == 0 and name == "size" and field.type.cname == "size_t":
            p.size = the_ffi.sizeof(ctype)
        elif field.type.kind == "struct":
            fill_sizes(the_ffi, getattr(p, name))  # the inner struct, in place


def new(ctype, **fields):
    """A new zeroed `ctype *` (e.g. new("stsa_attn_opts", scale=0.5)) with
    its size fields set (fill_sizes), then the given fields. io_ffi knows
    the types of both headers."""
    p = io_ffi.new(ctype + " *")
    fill_sizes(io_ffi, p)
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def copy(p):
    """A new struct holding a copy of struct *p (size fields included)."""
    return ffi.new(ffi.getctype(ffi.typeof(p)), p[0])


def status_name(code):
    """The library's name of a status code, e.g. 'invalid shape'."""
    return string(lib.stsa_status_str(code))
