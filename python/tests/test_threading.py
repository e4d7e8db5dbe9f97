"""The wait policy of stsa's OpenMP threads (stsa.threading_info()): passive
for the runtime's load unless the user chose, the process's environment
exactly as it was, and a report that says when the lever could not apply.

Each case is a fresh Python process (libgomp reads its environment once,
when it is loaded). OMP_DISPLAY_ENV=verbose makes libgomp print, at its
load, the spin count it took (0: passive; 300000: its default), so the
tests read what the runtime did, not only what stsa says."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import stsa
from stsa import _wait_policy

# run in the child: the C environment (what libgomp reads; os.environ is a
# copy) and os.environ before and after `import stsa`, and the report
CHILD = r"""
import ctypes, dataclasses, json, os, sys
import cffi, numpy  # stsa's dependencies: only stsa's own effect is compared

def c_environ():
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    entries, i = [], 0
    while env[i] is not None:
        entries.append(env[i].decode("utf-8", "surrogateescape"))
        i += 1
    return entries

before, py_before = c_environ(), dict(os.environ)
if len(sys.argv) > 1:
    ctypes.CDLL(sys.argv[1])  # the OpenMP runtime, loaded (and initialised) before stsa
import stsa
print(json.dumps(dict(before=before, after=c_environ(),
                      py_same=py_before == dict(os.environ),
                      info=dataclasses.asdict(stsa.threading_info()))))
"""


def child(extra_env=None, preload=None):
    """(the child's JSON report, libgomp's spin counts from its display)."""
    env = {k: v for k, v in os.environ.items() if k not in _wait_policy.USER_VARIABLES}
    env.update(extra_env or {}, OMP_DISPLAY_ENV="verbose")
    package = str(pathlib.Path(stsa.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package, env.get("PYTHONPATH")]))
    got = subprocess.run([sys.executable, "-c", CHILD] + ([preload] if preload else []),
                         env=env, capture_output=True, text=True, cwd="/", timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
    spins = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", got.stderr)
    return json.loads(got.stdout.strip().splitlines()[-1]), [int(s) for s in spins]


def runtime():
    """The OpenMP runtime of this stsa, if it is libgomp (the levers are
    libgomp's); else the test skips."""
    info = stsa.threading_info()
    if info.runtime is None or "libgomp" not in os.path.basename(
            os.path.realpath(info.runtime)):
        pytest.skip(f"stsa's OpenMP runtime is not libgomp: {info}")
    return info.runtime


def test_passive_for_the_load_and_the_environment_restored_byte_for_byte():
    runtime()
    report, spins = child()
    assert report["after"] == report["before"]  # same entries, same order, same bytes
    assert report["py_same"]
    assert not any(e.startswith("OMP_WAIT_POLICY=") for e in report["after"])
    info = report["info"]
    assert (info["wait_policy"], info["set_by"]) == ("passive", "stsa"), info
    assert spins == [0]  # libgomp took the passive policy: no spinning


@pytest.mark.parametrize("name, value, spin", [("OMP_WAIT_POLICY", "active", 30000000000),
                                               ("GOMP_SPINCOUNT", "1234", 1234),
                                               ("OMP_WAIT_POLICY", "", 300000)])
def test_a_policy_the_user_set_is_kept_and_reported(name, value, spin):
    runtime()
    report, spins = child({name: value})
    assert report["after"] == report["before"]
    assert f"{name}={value}" in report["after"]
    info = report["info"]
    assert (info["wait_policy"], info["set_by"]) == (f"{name}={value}", "user"), info
    assert spins == [spin]


def test_the_report_says_when_the_runtime_was_loaded_before_stsa():
    path = runtime()
    report, spins = child(preload=path)
    assert report["after"] == report["before"]
    info = report["info"]
    assert (info["wait_policy"], info["set_by"]) == ("unknown", "loaded before stsa"), info
    assert path in info["detail"] and "OMP_WAIT_POLICY=passive" in info["detail"]
    assert spins == [300000]  # initialised once, before stsa: libgomp's default


def test_this_process_reports_something_consistent():
    info = stsa.threading_info()
    assert isinstance(info, stsa.ThreadingInfo) and info.detail
    assert info.set_by in ("stsa", "user", "loaded before stsa", "not libgomp", "no OpenMP")
    if info.set_by == "stsa":
        assert info.wait_policy == "passive"
    if info.set_by == "user":
        assert "=" in info.wait_policy
