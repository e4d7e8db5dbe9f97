"""How libstsa's OpenMP threads wait between calls: passive, unless the user
chose, and said which (stsa.threading_info()).

libgomp's default keeps an idle worker spinning (about 3 ms, GOMP_SPINCOUNT
300000) after each parallel region; beside PyTorch's threads or another busy
process that spinning worker holds a core the region's last chunk needs.
libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its ELF
constructor (initialize_env in libgomp/env.c), i.e. when the dynamic linker
loads it, not at its first parallel region. So the variable is set in the
C environment for the dlopen of libstsa alone (which loads libgomp as its
dependency) and taken away again right after: the process's environment is
as it was (os.environ is never touched), children started later inherit
nothing of it.

The lever cannot apply when the libgomp that libstsa binds to was loaded
before (by torch, imported first, whose wheel ships a libgomp.so.1 of the
same name, or by any other library): libgomp is then initialised already,
with whatever the environment said at that time. That case is detected
(the runtime's file was mapped before the dlopen) and reported, never
silent. Another OpenMP runtime (LLVM's libomp reads its environment at its
first parallel region, after the variable is gone) is reported as such.
"""

import contextlib
import dataclasses
import os

import cffi

# what the user may have set to choose the wait policy themselves
# (OMP_WAIT_POLICY_ALL: OpenMP 5.1's form, read by libgomp 13 and later)
USER_VARIABLES = ("OMP_WAIT_POLICY", "OMP_WAIT_POLICY_ALL", "GOMP_SPINCOUNT")

# a libgomp entry point that every libstsa built with OpenMP calls
_OPENMP_SYMBOL = b"GOMP_parallel"

_c = cffi.FFI()
_c.cdef("""
char *getenv(const char *name);
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
void *dlopen(const char *file, int mode);
void *dlsym(void *handle, const char *name);
int dlclose(void *handle);
typedef struct {
    const char *dli_fname;
    void *dli_fbase;
    const char *dli_sname;
    void *dli_saddr;
} Dl_info;
int dladdr(const void *addr, Dl_info *info);
""")
# the process's own C library (the C environment, which libgomp reads;
# os.environ is a copy) and its dl* functions (in libc since glibc 2.34,
# before that in libdl, which the interpreter links to load extensions)
_libc = _c.dlopen(None)


@dataclasses.dataclass(frozen=True)
class ThreadingInfo:
    """Which OpenMP runtime libstsa's threads run on, and how they wait
    (stsa.threading_info())."""
    runtime: str       # the runtime's file (e.g. /lib/x86_64-linux-gnu/libgomp.so.1), or None
    wait_policy: str   # "passive"; the user's setting ("OMP_WAIT_POLICY=active"); "unknown"
    set_by: str        # "stsa", "user", "loaded before stsa", "not libgomp", "no OpenMP"
    detail: str        # one sentence saying why


def _getenv(name):
    value = _libc.getenv(name.encode())
    return None if value == _c.NULL else _c.string(value).decode(errors="replace")


def _user_settings():
    """The user's wait-policy variables that are set, as NAME=value."""
    return [f"{name}={_getenv(name)}" for name in USER_VARIABLES if _getenv(name) is not None]


def _mapped_files():
    """The real paths of the files mapped into this process, or None where
    /proc/self/maps cannot be read."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    # address perms offset dev inode path: the path is the 6th field, if any
    return {os.path.realpath(fields[5]) for fields in (line.split(maxsplit=5) for line in lines)
            if len(fields) == 6 and fields[5].startswith("/")}


class _Load:
    """What loading libstsa found out: filled by passive_for_load()."""

    def __init__(self):
        self.user = _user_settings()
        self.before = _mapped_files()
        self.info = None


@contextlib.contextmanager
def passive_for_load():
    """Around the dlopen of libstsa: OMP_WAIT_POLICY=passive in the C
    environment unless the user set a wait-policy variable, then the
    environment exactly as it was. Yields a _Load for report()."""
    load = _Load()
    added = False
    if not load.user:
        # overwrite=0: never replaces a value; checked just above anyway
        added = _libc.setenv(b"OMP_WAIT_POLICY", b"passive", 0) == 0
    try:
        yield load
    finally:
        if added:
            _libc.unsetenv(b"OMP_WAIT_POLICY")


def _runtime_of(library_path):
    """The file of the OpenMP runtime libstsa (loaded already) binds to, or None."""
    handle = _libc.dlopen(library_path.encode(), _c.RTLD_NOW | _c.RTLD_NOLOAD)
    if handle == _c.NULL:
        return None
    try:
        # a handle's dlsym searches the library, then its dependencies
        symbol = _libc.dlsym(handle, _OPENMP_SYMBOL)
        where = _c.new("Dl_info *")
        if symbol == _c.NULL or _libc.dladdr(symbol, where) == 0 or where.dli_fname == _c.NULL:
            return None
        return _c.string(where.dli_fname).decode(errors="replace")
    finally:
        _libc.dlclose(handle)  # drops the reference NOLOAD took; libstsa stays


def report(load, library_path):
    """The ThreadingInfo of libstsa at library_path, loaded inside
    passive_for_load() (load is what it yielded)."""
    runtime = _runtime_of(library_path)
    user = ", ".join(load.user)
    if runtime is None:
        return ThreadingInfo(None, "unknown", "no OpenMP",
                             f"{library_path} calls no OpenMP runtime that could be found "
                             f"(no {_OPENMP_SYMBOL.decode()}): a build without OpenMP runs "
                             "single-threaded")
    real = os.path.realpath(runtime)
    if "libgomp" not in os.path.basename(real):
        return ThreadingInfo(runtime, user or "unknown", "user" if user else "not libgomp",
                             f"the OpenMP runtime {runtime} is not libgomp; "
                             + (f"{user} is the user's" if user else
                                "its wait policy is its own default (stsa sets "
                                "OMP_WAIT_POLICY for libgomp's load only)"))
    if load.before is None or real in load.before:
        now = user or "no wait-policy variable now"
        why = ("it was loaded before stsa" if load.before is not None else
               "/proc/self/maps could not be read to tell whether it was loaded before stsa")
        return ThreadingInfo(runtime, "unknown", "loaded before stsa",
                             f"{runtime} was initialised before stsa could set its wait policy "
                             f"({why}, e.g. by torch imported first): it runs the policy the "
                             f"environment gave when it was loaded ({now}; unset means "
                             "libgomp's default, idle threads spin about 3 ms). Set "
                             "OMP_WAIT_POLICY=passive before Python starts, or import stsa "
                             "before torch")
    if user:
        return ThreadingInfo(runtime, user, "user",
                             f"{user} was set by the user; stsa left the environment alone")
    return ThreadingInfo(runtime, "passive", "stsa",
                         f"{runtime} was loaded with libstsa under OMP_WAIT_POLICY=passive "
                         "(set for the load only): idle threads sleep instead of spinning")
