"""Errors, contexts, and numpy / torch arrays as stsa_tensor descriptors.

Arrays are never copied when the C API can describe them: the descriptor is
the array's data pointer plus its strides in elements, permuted from the
caller's layout into stsa's logical [B, S, H, D]. Only inputs the C API
cannot take (negative or zero strides on a dimension longer than one, a
misaligned pointer, strides that are not whole elements, torch views with
the negative or conjugate bit) are copied, and an output array like that is
refused. Shapes are checked here first (rank, an empty dimension, D = 0), so
that the message names the problem rather than a stride or a NULL pointer.
"""

import math
import operator
import struct
import sys
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import ffi, lib

# ------------------------------------------------------------------ errors


class Error(Exception):
    """A failure reported by libstsa. `status` is the stsa_status code and
    `status_name` the library's name of it; str(e) is the library's message
    (stsa_ctx_last_error) where it gave one. Every stsa.Error is also a
    ValueError, TypeError, MemoryError, ... as its status says."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
        self.status_name = _lib.status_name(status) if status is not None else None


class StsaValueError(Error, ValueError):
    pass


class StsaTypeError(Error, TypeError):
    pass


class StsaMemoryError(Error, MemoryError):
    pass


class StsaNotImplementedError(Error, NotImplementedError):
    pass


class StsaOSError(Error, OSError):
    pass


_ERROR_CLASS = {
    lib.STSA_ERR_BAD_DTYPE: StsaTypeError,
    lib.STSA_ERR_OUT_OF_MEMORY: StsaMemoryError,
    lib.STSA_ERR_UNSUPPORTED: StsaNotImplementedError,
    lib.STSA_ERR_IO: StsaOSError,
}


def raise_status(status, message):
    raise _ERROR_CLASS.get(status, StsaValueError)(message, status)


def check(status, ctx=None, what=""):
    """Raises the stsa.Error of a non-OK status, with the context's message."""
    if status == lib.STSA_OK:
        return
    message = ""
    if ctx is not None:
        message = _lib.string(lib.stsa_ctx_last_error(ctx)) or ""
    if not message:
        message = f"{what}: {_lib.status_name(status)}" if what else _lib.status_name(status)
    raise_status(status, message)


INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)


def as_int(value, name, bounds=INT64):
    """value as a Python int inside `bounds` (lo, hi), the range of the C
    type it goes into, or an stsa.Error naming the accepted range (cffi
    would raise a bare OverflowError; a float would be truncated)."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    lo, hi = bounds
    if not lo <= n <= hi:
        raise_status(lib.STSA_ERR_BAD_PARAM, f"{name} = {n} is out of range [{lo}, {hi}]")
    return n


def given(value):
    """A value as the caller gave it, for a message (a huge integer shortened)."""
    text = str(value)
    if isinstance(value, int) and len(text) > 40:
        return f"{text[:24]}... ({len(text.lstrip('-'))} digits)"
    return text


def as_real(value, name):
    """value as a Python float (a C double holds it exactly), or a TypeError
    naming the argument for what is not one real number (a str, a bool, a
    complex, a sequence or an array of more than one element: float() would
    parse a str and give cffi's or numpy's message for the rest), and an
    stsa.Error naming the value for an integer too large for a double."""
    if isinstance(value, (str, bytes, bool, np.bool_)) or getattr(value, "ndim", 0) != 0:
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        pass  # raised below, outside the handler: no chained OverflowError
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}") from None
    raise_status(lib.STSA_ERR_BAD_PARAM, f"{name} = {given(value)} is too large for a float")


def choice(value, choices, name):
    """value if it is one of the str keys of `choices`, else a ValueError
    naming them (a non-str, unhashable or not, is not one of them either)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} {value!r} is not one of {', '.join(choices)}")
    return value


# ------------------------------------------------------------------ native handles


class NativeHandle:
    """Base of the classes that own a handle of the C library (a context, a
    session, a plan, a mask): they cannot be pickled or copied. A copy would
    share the handle, which the original frees when it goes (a use after
    free), and the C state has no serialised form."""

    __slots__ = ()

    def _no_copy(self, *args):
        raise TypeError(f"cannot pickle or copy an stsa.{type(self).__name__}: it owns "
                        f"native state (a handle of the C library, freed with the object) "
                        f"that cannot be shared or serialised; create a new one with the "
                        f"same arguments")

    __reduce_ex__ = __reduce__ = __copy__ = __deepcopy__ = _no_copy


# ------------------------------------------------------------------ contexts


class Context(NativeHandle):
    """An stsa_ctx: thread count, backend, tile sizes, finite checks.

    A context is used by one call at a time: calls on one Context from
    several Python threads are serialised by its lock (`ctx.lock`), and
    close() takes the same lock, so it waits for a call in flight instead of
    freeing the context under it. Functions that take `ctx=` use a
    per-thread default context when it is None.
    """

    def __init__(self, threads=None, backend=None, q_tile=None, kv_tile=None,
                 check_finite=None, pv_precision=None, bf16_terms=None):
        self.lock = threading.RLock()
        self._owner = None  # the stsa.SVG whose session uses this context, if any
        handle = ffi.new("stsa_ctx **")
        msg = ffi.new("char[]", 512)
        status = lib.stsa_ctx_create_msg(handle, msg, len(msg))
        if status != lib.STSA_OK:  # e.g. an unknown STSA_BACKEND in the environment
            raise_status(status, "stsa_ctx_create: " + _lib.string(msg))
        handle = handle[0]
        self._handle = handle
        self._finalizer = weakref.finalize(self, _free_context, handle, self.lock)
        for name, value in (("threads", threads), ("backend", backend), ("q_tile", q_tile),
                            ("kv_tile", kv_tile), ("check_finite", check_finite),
                            ("pv_precision", pv_precision), ("bf16_terms", bf16_terms)):
            if value is not None:
                self.set(name, value)

    @property
    def handle(self):
        """The stsa_ctx pointer. Use it only while holding `lock`: close()
        from another thread may free it otherwise."""
        if not self._finalizer.alive:
            raise ValueError("stsa.Context is closed")
        return self._handle

    @property
    def closed(self):
        return not self._finalizer.alive

    def set(self, name, value):
        """Sets a parameter: threads, backend (a name of stsa.backends():
        'auto', 'ref', 'portable', 'avx2', ...), q_tile, kv_tile, check_finite (bool),
        pv_precision (how probabilities enter P.V, by name: 'auto' (what the output keeps), 'bf16' (as
        PyTorch's bf16 SDPA rounds), 'near-f32' (2^-18) or 'f32'; only the
        bf16 tiles of the amx and avx512bf16 backends run less than 'f32'),
        or bf16_terms, its number (0-3, the bf16 terms per probability).
        Integers outside the library's bounds (stsa_param_bounds) are
        refused with the range."""
        if name == "bf16_terms":  # the parameter's earlier name, kept
            name = "pv_precision"
        if not isinstance(name, str) or name not in _lib.PARAMS:
            raise ValueError(f"unknown parameter {name!r}; expected one of "
                             f"{', '.join(_lib.PARAMS)}")
        if name == "backend" and isinstance(value, str):
            if value not in _lib.BACKENDS:
                raise ValueError(f"unknown backend {value!r}; expected one of "
                                 f"{', '.join(_lib.BACKENDS)}")
            value = _lib.BACKENDS[value]
        if name == "pv_precision" and isinstance(value, str):
            if value not in _lib.PV_PRECISIONS:
                raise ValueError(f"unknown pv_precision {value!r}; expected one of "
                                 f"{', '.join(_lib.PV_PRECISIONS)}")
            value = _lib.PV_PRECISIONS.index(value)
        value = as_int(value, name, param_bounds(name))
        with self.lock:
            check(lib.stsa_ctx_set(self.handle, _lib.PARAMS[name], value), self.handle,
                  f"stsa_ctx_set({name})")

    def get(self, name):
        if name == "bf16_terms":
            name = "pv_precision"
        if not isinstance(name, str) or name not in _lib.PARAMS:
            raise ValueError(f"unknown parameter {name!r}; expected one of "
                             f"{', '.join(_lib.PARAMS)}")
        value = ffi.new("int64_t *")
        with self.lock:
            check(lib.stsa_ctx_get(self.handle, _lib.PARAMS[name], value), self.handle,
                  f"stsa_ctx_get({name})")
        return value[0]

    @property
    def backend(self):
        """The backend calls on this context actually run ('avx2', ...)."""
        with self.lock:
            return _lib.string(lib.stsa_backend_name(lib.stsa_ctx_backend(self.handle)))

    @property
    def last_error(self):
        with self.lock:
            return _lib.string(lib.stsa_ctx_last_error(self.handle)) or ""

    @property
    def last_run(self):
        """What the last attention call on this context that succeeded ran
        (stsa_ctx_last_run), as a dict: "backend" ('avx512', ...),
        "arithmetic" ('f64' for ref, 'f32', or 'bf16-tiles': the bf16 tiles
        of the amx and avx512bf16 backends), "bf16_terms" (bf16 terms per
        probability with 'bf16-tiles', else 0), "pv_precision" (how the
        probabilities entered P.V: 'f32' exactly, 'near-f32' or 'bf16';
        always 'f32' but for the bf16 tiles) and "why" ('' when the call
        ran the fastest arithmetic its backend has, else the reason, e.g.
        'q, k and v are f16, f16 and f16: the bf16 tiles take bf16 only'). None
        before the first successful call. Dense, block-sparse and the
        attention proper of an SVG call (every head of a call runs one
        arithmetic)."""
        info = _lib.new("stsa_run_info")
        with self.lock:
            status = lib.stsa_ctx_last_run(self.handle, info)
        return run_info(info) if status == lib.STSA_OK else None

    def close(self):
        """Frees the context now (otherwise when it is garbage collected).
        Waits for a call in flight on another thread; calls after close()
        raise ValueError. A session's context is closed with the session."""
        if self._owner is not None and self._owner() is not None:
            raise ValueError("this stsa.Context belongs to an stsa.SVG session, which "
                             "keeps using it: close the session (svg.close()) instead")
        self._finalizer()

    def __repr__(self):
        if not self._finalizer.alive:
            return "stsa.Context(closed)"
        return f"stsa.Context(threads={self.get('threads')}, backend={self.backend!r})"


def run_info(info):
    """The dict of an stsa_run_info: backend, arithmetic, bf16_terms,
    pv_precision, why."""
    return {"backend": _lib.string(lib.stsa_backend_name(info.backend)),
            "arithmetic": _lib.string(lib.stsa_arith_name(info.arith)),
            "bf16_terms": int(info.bf16_terms),
            "pv_precision": _lib.PV_PRECISIONS[info.pv_precision],
            "why": ffi.string(info.why).decode(errors="replace")}


def _free_context(handle, lock):
    # the finalizer of a Context (close(), garbage collection, interpreter
    # exit): under the context's lock, so never while a call uses it
    with lock:
        lib.stsa_ctx_free(handle)


def param_bounds(name):
    """(lo, hi) of a context parameter (stsa_param_bounds)."""
    lo, hi = ffi.new("int64_t *"), ffi.new("int64_t *")
    check(lib.stsa_param_bounds(_lib.PARAMS[name], lo, hi), what=f"stsa_param_bounds({name})")
    return lo[0], hi[0]


_local = threading.local()


def context(ctx):
    """ctx, or this thread's default context when it is None."""
    if ctx is None:
        return default_context()
    if not isinstance(ctx, Context):
        raise TypeError(f"ctx must be an stsa.Context, got {type(ctx).__name__}")
    return ctx


def default_context():
    """This thread's default context (created on first use, and again after
    someone closed it)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None or ctx.closed:
        ctx = _local.ctx = Context()
    return ctx


class threads_set:
    """`with threads_set(ctx, n) as handle:` holds ctx's lock, runs calls on
    the context with n threads, then restores what was there (None leaves
    the context as it is). `handle` is the stsa_ctx pointer, valid for the
    whole block: close() on another thread waits for the block to end."""

    def __init__(self, ctx, threads):
        self.ctx, self.threads = ctx, threads
        if threads is not None:
            self.threads = as_int(threads, "threads", param_bounds("threads"))

    def __enter__(self):
        self.ctx.lock.acquire()
        try:
            self.handle = self.ctx.handle  # raises if the context is closed
            if self.threads is not None:
                self.saved = self._param("threads")
                self._set(self.threads)
        except BaseException:
            self.ctx.lock.release()
            raise
        return self.handle

    def _param(self, name):
        value = ffi.new("int64_t *")
        check(lib.stsa_ctx_get(self.handle, _lib.PARAMS[name], value), self.handle,
              f"stsa_ctx_get({name})")
        return value[0]

    def _set(self, n):
        check(lib.stsa_ctx_set(self.handle, _lib.PARAMS["threads"], n), self.handle,
              "stsa_ctx_set(threads)")

    def __exit__(self, *exc):
        try:
            if self.threads is not None:
                self._set(self.saved)
        finally:
            self.ctx.lock.release()


# ------------------------------------------------------------------ arrays

# layout -> (array rank, array axis of each of stsa's B, S, H, D; None: B = 1)
LAYOUTS = {
    "bshd": (4, (0, 1, 2, 3)),
    "bhsd": (4, (0, 2, 1, 3)),
    "shd": (3, (None, 0, 1, 2)),
}


class _Required:
    """The default of a required `layout=`: omitting it is a TypeError that
    names the choices, never a silent guess."""

    def __repr__(self):
        return "<required>"


REQUIRED = _Required()

LAYOUT_CHOICES = ("'bshd' ([B, S, H, D]: diffusers), 'bhsd' ([B, H, S, D]: "
                  "torch's scaled_dot_product_attention), 'shd' ([S, H, D]: one sequence)")


def check_layout(layout, who="stsa"):
    if layout is REQUIRED:
        raise TypeError(f"{who}: layout= is required: say how the arrays are laid out, "
                        f"one of {LAYOUT_CHOICES}")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUT_CHOICES}")
    return LAYOUTS[layout]


def _torch():
    """The torch module if the caller has imported it (never imports it)."""
    return sys.modules.get("torch")


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


_NP_DTYPES = {np.dtype(np.float32): lib.STSA_F32, np.dtype(np.float16): lib.STSA_F16}


def _numpy_code(dtype):
    code = _NP_DTYPES.get(dtype)
    if code is None and dtype.name == "bfloat16" and dtype.itemsize == 2:
        code = lib.STSA_BF16  # ml_dtypes.bfloat16
    return code


def _torch_code(dtype):
    torch = _torch()
    return {torch.float32: lib.STSA_F32, torch.float16: lib.STSA_F16,
            torch.bfloat16: lib.STSA_BF16}.get(dtype)


class View:
    """An array seen as an stsa_tensor (`tensor`: an `stsa_tensor *`). Holds
    the array (or the copy made of it) alive for as long as the descriptor
    is used."""

    __slots__ = ("array", "tensor", "copied", "code")

    def __init__(self, array, tensor, copied, code):
        self.array, self.tensor, self.copied, self.code = array, tensor, copied, code


def _strides_ok(shape, strides, itemsize, ptr):
    if ptr % itemsize:
        return False
    for n, s in zip(shape, strides):
        if n > 1 and (s <= 0 or s % itemsize):
            return False
    return True


def _check_shape(name, shape, layout, rank):
    """Refuses an array of the wrong rank, a head dim of 0 or another empty
    dimension before the C API sees it (it would only see a stride or a
    NULL data pointer)."""
    shape = tuple(int(n) for n in shape)
    if len(shape) != rank:
        raise ValueError(f"{name} has {len(shape)} dimensions {shape} but layout "
                         f"{layout!r} needs {rank}")
    if shape[-1] == 0:
        raise_status(lib.STSA_ERR_BAD_SHAPE, f"{name}: head dim is 0 (shape {shape}, "
                                             f"layout {layout!r})")
    if 0 in shape:
        raise_status(lib.STSA_ERR_BAD_SHAPE, f"{name} is empty (shape {shape}, layout "
                                             f"{layout!r}): every dimension must be >= 1")


def _descriptor(ptr, code, shape, strides_el, axes):
    t = _lib.new("stsa_tensor", data=ffi.cast("void *", ptr), dtype=code)
    for i, ax in enumerate(axes):
        if ax is None:
            t.shape[i], t.stride[i] = 1, 1
        else:
            n, s = shape[ax], strides_el[ax]
            t.shape[i] = n
            t.stride[i] = s if n > 1 else 1  # a size-0/1 dimension never steps
    return t


def check_array(x, name):
    """Refuses what is neither a numpy array nor a torch tensor."""
    if not (isinstance(x, np.ndarray) or is_torch(x)):
        raise TypeError(f"{name} must be a numpy array or a CPU torch tensor, "
                        f"got {type(x).__name__}")


def _refuse_output(name, ptr, itemsize, dtype, strides):
    """The ValueError of an output stsa cannot write in place: a misaligned
    pointer, or strides (as the caller's array states them)."""
    if ptr % itemsize:
        raise ValueError(f"{name}: data pointer {ptr:#x} is not aligned to its "
                         f"{itemsize}-byte {dtype} elements: stsa cannot write into it in "
                         f"place; pass an aligned array (numpy and torch allocate aligned "
                         f"ones)")
    raise ValueError(f"{name}: strides {strides} cannot be written in place: stsa needs "
                     f"positive strides of whole elements")


def view(x, name, layout, output=False):
    """Describes array x (numpy or CPU torch) in `layout` as an stsa_tensor.

    Inputs the C API cannot describe are copied; outputs are refused."""
    rank, axes = check_layout(layout, name)
    check_array(x, name)
    if is_torch(x):
        return _view_torch(x, name, layout, rank, axes, output)
    code = _numpy_code(x.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; stsa takes float32, "
                        f"float16 or bfloat16 (f32, f16, bf16)")
    _check_shape(name, x.shape, layout, rank)
    copied = False
    if not _strides_ok(x.shape, x.strides, x.itemsize, x.ctypes.data):
        if output:
            _refuse_output(name, x.ctypes.data, x.itemsize, x.dtype, f"{x.strides} (bytes)")
        # a new array, so aligned: np.ascontiguousarray would return a
        # contiguous but misaligned array as it is
        x = np.array(x, order="C")
        copied = True
    if output and not x.flags.writeable:
        raise ValueError(f"{name} is read-only")
    strides_el = [s // x.itemsize for s in x.strides]
    return View(x, _descriptor(x.ctypes.data, code, x.shape, strides_el, axes), copied, code)


def _view_torch(x, name, layout, rank, axes, output):
    torch = _torch()
    if x.device.type != "cpu":
        raise ValueError(f"{name} is on {x.device}; stsa runs on the CPU (pass "
                         f"{name}.cpu())")
    if x.layout != torch.strided:
        raise TypeError(f"{name} is a {x.layout} torch tensor; stsa takes dense (strided) "
                        f"tensors only: pass {name}.to_dense()")
    code = _torch_code(x.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; stsa takes "
                        f"torch.float32, torch.float16 or torch.bfloat16")
    _check_shape(name, x.shape, layout, rank)
    if output and x.requires_grad:
        raise ValueError(f"{name} requires grad; stsa writes outputs without autograd")
    x = x.detach()  # stsa has no backward pass; the data pointer is the same
    copied = False
    # A view with the negative (torch._neg_view) or conjugate bit set holds
    # data that torch negates or conjugates lazily: stsa reads raw memory, so
    # such an input is resolved into a copy and such an output refused.
    lazy = [bit for bit, on in (("negative", x.is_neg()), ("conjugate", x.is_conj())) if on]
    if lazy:
        if output:
            raise ValueError(f"{name} has the {' and '.join(lazy)} bit set (a lazy view); "
                             f"stsa cannot write into it: pass a plain tensor")
        x = x.resolve_neg().resolve_conj()
        copied = True
    itemsize = x.element_size()
    strides_b = [s * itemsize for s in x.stride()]
    if not _strides_ok(x.shape, strides_b, itemsize, x.data_ptr()):
        if output:
            _refuse_output(name, x.data_ptr(), itemsize, x.dtype,
                           f"{tuple(x.stride())} (elements)")
        # a new tensor, so aligned: contiguous() would return a contiguous
        # but misaligned tensor as it is
        x = x.clone(memory_format=torch.contiguous_format)
        copied = True
    return View(x, _descriptor(x.data_ptr(), code, x.shape, x.stride(), axes), copied, code)


def empty_like_layout(ref, shape):
    """A new array of ref's kind (numpy or torch) and dtype with `shape`."""
    if is_torch(ref):
        return _torch().empty(tuple(shape), dtype=ref.dtype)
    return np.empty(tuple(shape), dtype=ref.dtype)


def empty_f32(ref, shape):
    if is_torch(ref):
        torch = _torch()
        return torch.empty(tuple(shape), dtype=torch.float32)
    return np.empty(tuple(shape), dtype=np.float32)


def pointer(arr, ctype="float"):
    """A `ctype *` to the data of a contiguous numpy array or torch tensor
    (the caller keeps the array alive while the pointer is used)."""
    return ffi.cast(ctype + " *", arr.data_ptr() if is_torch(arr) else arr.ctypes.data)


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TRUE_MIN = float(np.finfo(np.float32).smallest_subnormal)


def scale_value(scale):
    """The opts.scale of a Python scale (None: the library's 1/sqrt(D)).

    Checked here, as given: opts.scale is a float32, so a huge scale would
    reach the library as inf and a tiny one as 0, which it reads as
    "1/sqrt(D)"."""
    if scale is None:
        return 0.0
    value = as_real(scale, "scale")
    if value == 0:  # the C API reads 0 as "default": say so rather than surprise
        raise ValueError("scale = 0: pass scale=None for 1/sqrt(D)")
    if not (math.isfinite(value) and value > 0):
        raise_status(lib.STSA_ERR_BAD_PARAM, f"scale = {given(scale)} must be a positive "
                                             f"finite number (None: 1/sqrt(D))")
    as_float32 = struct.unpack("f", struct.pack("f", value))[0]  # rounded as C rounds it
    if math.isinf(as_float32):
        raise_status(lib.STSA_ERR_BAD_PARAM,
                     f"scale = {given(scale)} is too large: the library takes the scale as "
                     f"a float32, at most {FLOAT32_MAX:.8g}")
    if as_float32 == 0:
        raise_status(lib.STSA_ERR_BAD_PARAM,
                     f"scale = {given(scale)} is too small: the library takes the scale as "
                     f"a float32, where it rounds to 0, read as 1/sqrt(D) (pass "
                     f"scale=None for that); the least is {FLOAT32_TRUE_MIN:.2g}")
    return value
