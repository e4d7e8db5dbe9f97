"""stsa._header: a C header turned into cffi declarations."""

import cffi
import pytest

from stsa import _header

HEADER = r"""/* a header as stsa.h is written */
#ifndef T_H
#define T_H
#include <stdint.h>
#define T_MAJOR 2
#define T_NUMBER (T_MAJOR * 100 + 3)
#define T_MIN INT64_MIN
#define T_NAME "t"
#define T_INIT { 0, 1 }
#if defined(_WIN32)
#define T_API __declspec(dllexport)
#elif defined(__GNUC__)
#define T_API __attribute__((visibility("default")))
#else
#define T_API
#endif
#define T_DEPRECATED(msg) __attribute__((deprecated(msg)))
#define T_INLINE static inline
#define T_EXPORT [[nodiscard]]
#define T_API2 T_API T_EXPORT
#ifdef __cplusplus
extern "C" {
#endif
typedef enum t_kind { T_A = 0, T_B = 1, /* comment // inside */ T_COUNT_ } t_kind;
typedef struct t_opts {
  size_t size;         /* sizeof(t_opts) */
  int64_t v[T_MAJOR];
} t_opts;
#if T_NUMBER > 200 && !defined(T_NEVER)
T_API int t_new(t_opts *o);
#if 0
this is not C
#endif
#else
this is not C either
#endif
static inline void t_opts_init(t_opts *o) {
  if (o) { o->size = sizeof *o; }
}
T_DEPRECATED("use t_new") T_API int t_old(int a,
                                          int b);
T_INLINE int t_helper(void) { return T_MAJOR; }
T_API2 int t_nested(void);
#define T_LONG 1 + \
  2
T_API int t_after(void);
#ifdef __cplusplus
}
#endif
#endif
"""


def test_a_header_becomes_declarations_cffi_takes():
    ffi = cffi.FFI()
    ffi.cdef(_header.cdef_source(HEADER))
    lib = ffi.dlopen(None)  # symbols are only looked up when used
    assert (lib.T_A, lib.T_B, lib.T_COUNT_) == (0, 1, 2)
    assert (lib.T_MAJOR, lib.T_NUMBER, lib.T_MIN, lib.T_LONG) == (2, 203, -(2**63), 3)
    names = set(dir(lib))
    assert {"t_new", "t_old", "t_nested", "t_after"} <= names
    assert "t_opts_init" not in names and "t_helper" not in names
    assert "T_NAME" not in names and "T_INIT" not in names
    assert ffi.typeof("t_opts").fields[1][1].type.length == 2  # the macro's value
    assert ffi.sizeof("t_opts") == 8 + 2 * 8


def test_line_numbers_are_the_headers():
    decls = _header.cdef_source(HEADER).split("\n")
    lines = HEADER.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("T_API int t_after"):
            assert decls[i].strip() == "int t_after(void);"
            break
    else:
        raise AssertionError("t_after not found")


@pytest.mark.parametrize("expr, value", [
    ("1 + 2 * 3", 7), ("(1 << 4) | 1", 17), ("defined(A) && !defined(B)", 1),
    ("defined A || 0", 1), ("UNKNOWN", 0), ("A * 2 == 6", 1), ("10 / 3", 3),
    ("0x10u", 16), ("INT32_MAX", 2**31 - 1),
])
def test_preprocessor_expressions(expr, value):
    macros = {"A": _header.Macro("3", False, {})}
    assert _header.evaluate(expr, macros) == value


def test_predefined_names_switch_branches():
    text = "#ifdef __cplusplus\nint cxx(void);\n#else\nint c(void);\n#endif\n"
    assert "cxx" not in _header.cdef_source(text)
    assert "cxx" in _header.cdef_source(text, predefined=["__cplusplus"])


def test_an_including_header_uses_the_included_macros_without_repeating_them():
    """stsa_io.h's case: its functions carry stsa.h's STSA_API, and its
    declarations go into an FFI that includes the one of stsa.h."""
    base = ("#define T_API __attribute__((visibility(\"default\")))\n#define T_N 4\n"
            "typedef struct t_x { int v[T_N]; } t_x;\nT_API int t_base(void);\n")
    extra = ("#ifdef T_EXTRA\nT_API int t_extra(t_x *x);\n#endif\n#define T_IO 7\n"
             "T_API int t_io(int v[T_N]);\n")
    decls = _header.cdef_source(extra, predefined=["T_EXTRA"], included=[base])
    assert "T_API" not in decls and "t_base" not in decls and "#define T_N" not in decls
    ffi = cffi.FFI()
    ffi.cdef(_header.cdef_source(base, predefined=["T_EXTRA"]))
    io_ffi = cffi.FFI()
    io_ffi.include(ffi)
    io_ffi.cdef(decls)
    lib = io_ffi.dlopen(None)
    assert {"t_extra", "t_io", "T_IO"} <= set(dir(lib)) and "t_base" not in dir(lib)
    assert "t_extra" not in _header.cdef_source(extra, included=[base])


@pytest.mark.parametrize("text", ["#if 1\nint a;\n", "#endif\n", "#else\n",
                                  "#error stop\n", "#if 1 +\n#endif\n"])
def test_malformed_headers_are_errors(text):
    with pytest.raises(_header.HeaderError):
        _header.cdef_source(text)
