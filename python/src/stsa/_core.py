"""Errors, contexts, and numpy / torch arrays as stsa_tensor descriptors.

Arrays are never copied when the C API can describe them: the descriptor is
the array's data pointer plus its strides in elements, permuted from the
caller's layout into stsa's logical [B, S, H, D]. Only inputs the C API
cannot take (negative or zero strides on a dimension longer than one, a
misaligned pointer, strides that are not whole elements) are copied, and an
output array passed with such strides is refused.
"""

import ctypes
import sys
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import lib

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
    _lib.STSA_ERR_BAD_DTYPE: StsaTypeError,
    _lib.STSA_ERR_OUT_OF_MEMORY: StsaMemoryError,
    _lib.STSA_ERR_UNSUPPORTED: StsaNotImplementedError,
    _lib.STSA_ERR_IO: StsaOSError,
}


def raise_status(status, message):
    raise _ERROR_CLASS.get(status, StsaValueError)(message, status)


def check(status, ctx=None, what=""):
    """Raises the stsa.Error of a non-OK status, with the context's message."""
    if status == _lib.STSA_OK:
        return
    message = ""
    if ctx is not None:
        message = (lib.stsa_ctx_last_error(ctx) or b"").decode(errors="replace")
    if not message:
        message = f"{what}: {_lib.status_name(status)}" if what else _lib.status_name(status)
    raise_status(status, message)


# ------------------------------------------------------------------ contexts


class Context:
    """An stsa_ctx: thread count, backend, tile sizes, finite checks.

    A context is used by one call at a time (calls on one Context from several
    Python threads are serialised by a lock). Functions that take `ctx=` use
    a per-thread default context when it is None.
    """

    def __init__(self, threads=None, backend=None, q_tile=None, kv_tile=None,
                 check_finite=None):
        handle = _lib.CtxP()
        check(lib.stsa_ctx_create(ctypes.byref(handle)), what="stsa_ctx_create")
        self._handle = handle
        self._finalizer = weakref.finalize(self, lib.stsa_ctx_free, handle)
        self.lock = threading.RLock()
        for name, value in (("threads", threads), ("backend", backend), ("q_tile", q_tile),
                            ("kv_tile", kv_tile), ("check_finite", check_finite)):
            if value is not None:
                self.set(name, value)

    @property
    def handle(self):
        if not self._finalizer.alive:
            raise ValueError("stsa.Context is closed")
        return self._handle

    def set(self, name, value):
        """Sets a parameter: threads, backend ('auto', 'ref', 'portable',
        'avx2'), q_tile, kv_tile, check_finite (bool)."""
        if name not in _lib.PARAMS:
            raise ValueError(f"unknown parameter {name!r}; expected one of "
                             f"{', '.join(_lib.PARAMS)}")
        if name == "backend" and isinstance(value, str):
            if value not in _lib.BACKENDS:
                raise ValueError(f"unknown backend {value!r}; expected one of "
                                 f"{', '.join(_lib.BACKENDS)}")
            value = _lib.BACKENDS[value]
        with self.lock:
            check(lib.stsa_ctx_set(self.handle, _lib.PARAMS[name], int(value)), self.handle,
                  f"stsa_ctx_set({name})")

    def get(self, name):
        if name not in _lib.PARAMS:
            raise ValueError(f"unknown parameter {name!r}")
        value = ctypes.c_int64()
        with self.lock:
            check(lib.stsa_ctx_get(self.handle, _lib.PARAMS[name], ctypes.byref(value)),
                  self.handle, f"stsa_ctx_get({name})")
        return value.value

    @property
    def backend(self):
        """The backend calls on this context actually run ('avx2', ...)."""
        return lib.stsa_backend_name(lib.stsa_ctx_backend(self.handle)).decode()

    @property
    def last_error(self):
        return (lib.stsa_ctx_last_error(self.handle) or b"").decode(errors="replace")

    def close(self):
        self._finalizer()

    def __repr__(self):
        if not self._finalizer.alive:
            return "stsa.Context(closed)"
        return f"stsa.Context(threads={self.get('threads')}, backend={self.backend!r})"


_local = threading.local()


def default_context():
    """This thread's default context (created on first use)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = Context()
    return ctx


class threads_set:
    """`with threads_set(ctx, n):` runs calls on ctx with n threads, then
    restores what was there (None leaves the context as it is)."""

    def __init__(self, ctx, threads):
        self.ctx, self.threads = ctx, threads

    def __enter__(self):
        self.ctx.lock.acquire()
        if self.threads is not None:
            self.saved = self.ctx.get("threads")
            try:
                self.ctx.set("threads", self.threads)
            except BaseException:
                self.ctx.lock.release()
                raise
        return self.ctx

    def __exit__(self, *exc):
        try:
            if self.threads is not None:
                self.ctx.set("threads", self.saved)
        finally:
            self.ctx.lock.release()


# ------------------------------------------------------------------ arrays

# layout -> (array rank, array axis of each of stsa's B, S, H, D; None: B = 1)
LAYOUTS = {
    "bshd": (4, (0, 1, 2, 3)),
    "bhsd": (4, (0, 2, 1, 3)),
    "shd": (3, (None, 0, 1, 2)),
}


def check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of 'bshd' ([B,S,H,D]), "
                         f"'bhsd' ([B,H,S,D]), 'shd' ([S,H,D])")
    return LAYOUTS[layout]


def _torch():
    """The torch module if the caller has imported it (never imports it)."""
    return sys.modules.get("torch")


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


_NP_DTYPES = {np.dtype(np.float32): _lib.STSA_F32, np.dtype(np.float16): _lib.STSA_F16}


def _numpy_code(dtype):
    code = _NP_DTYPES.get(dtype)
    if code is None and dtype.name == "bfloat16" and dtype.itemsize == 2:
        code = _lib.STSA_BF16  # ml_dtypes.bfloat16
    return code


def _torch_code(dtype):
    torch = _torch()
    return {torch.float32: _lib.STSA_F32, torch.float16: _lib.STSA_F16,
            torch.bfloat16: _lib.STSA_BF16}.get(dtype)


class View:
    """An array seen as an stsa_tensor. Holds the array (or the copy made of
    it) alive for as long as the descriptor is used."""

    __slots__ = ("array", "tensor", "copied", "code")

    def __init__(self, array, tensor, copied, code):
        self.array, self.tensor, self.copied, self.code = array, tensor, copied, code


def _strides_ok(shape, strides, itemsize, ptr):
    if 0 in tuple(shape):
        return True  # addresses nothing; the library reports the empty dimension
    if ptr % itemsize:
        return False
    for n, s in zip(shape, strides):
        if n > 1 and (s <= 0 or s % itemsize):
            return False
    return True


def _descriptor(ptr, code, shape, strides_el, axes):
    t = _lib.Tensor()
    t.data = ptr
    t.dtype = code
    for i, ax in enumerate(axes):
        if ax is None:
            t.shape[i], t.stride[i] = 1, 1
        else:
            n, s = shape[ax], strides_el[ax]
            t.shape[i] = n
            t.stride[i] = s if n > 1 else 1  # a size-0/1 dimension never steps
    return t


def view(x, name, layout, output=False):
    """Describes array x (numpy or CPU torch) in `layout` as an stsa_tensor.

    Inputs the C API cannot describe are copied; outputs are refused."""
    rank, axes = check_layout(layout)
    if is_torch(x):
        return _view_torch(x, name, layout, rank, axes, output)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a CPU torch tensor, "
                        f"got {type(x).__name__}")
    code = _numpy_code(x.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; stsa takes float32, "
                        f"float16 or bfloat16 (f32, f16, bf16)")
    if x.ndim != rank:
        raise ValueError(f"{name} has {x.ndim} dimensions {tuple(x.shape)} but layout "
                         f"{layout!r} needs {rank}")
    copied = False
    if not _strides_ok(x.shape, x.strides, x.itemsize, x.ctypes.data):
        if output:
            raise ValueError(f"{name}: strides {x.strides} (bytes) cannot be written in "
                             f"place: stsa needs positive strides of whole elements")
        x = np.ascontiguousarray(x)
        copied = True
    if output and not x.flags.writeable:
        raise ValueError(f"{name} is read-only")
    strides_el = [s // x.itemsize for s in x.strides]
    return View(x, _descriptor(x.ctypes.data, code, x.shape, strides_el, axes), copied, code)


def _view_torch(x, name, layout, rank, axes, output):
    if x.device.type != "cpu":
        raise ValueError(f"{name} is on {x.device}; stsa runs on the CPU (pass "
                         f"{name}.cpu())")
    code = _torch_code(x.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported; stsa takes "
                        f"torch.float32, torch.float16 or torch.bfloat16")
    if x.dim() != rank:
        raise ValueError(f"{name} has {x.dim()} dimensions {tuple(x.shape)} but layout "
                         f"{layout!r} needs {rank}")
    if output and x.requires_grad:
        raise ValueError(f"{name} requires grad; stsa writes outputs without autograd")
    x = x.detach()  # stsa has no backward pass; the data pointer is the same
    itemsize = x.element_size()
    strides_b = [s * itemsize for s in x.stride()]
    copied = False
    if not _strides_ok(x.shape, strides_b, itemsize, x.data_ptr()):
        if output:
            raise ValueError(f"{name}: strides {tuple(x.stride())} cannot be written in "
                             f"place: stsa needs positive strides")
        x = x.contiguous()
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


def float_ptr(arr):
    """A float* to a contiguous float32 numpy array or torch tensor."""
    if is_torch(arr):
        return ctypes.cast(arr.data_ptr(), _lib.c_float_p)
    return arr.ctypes.data_as(_lib.c_float_p)


def scale_value(scale):
    """The opts.scale of a Python scale (None: the library's 1/sqrt(D))."""
    if scale is None:
        return 0.0
    scale = float(scale)
    if scale == 0:  # the C API reads 0 as "default": say so rather than surprise
        raise ValueError("scale = 0: pass scale=None for 1/sqrt(D)")
    return scale  # negative or NaN: the library refuses it with its message
