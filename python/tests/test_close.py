"""close(), finalizers and locks: nothing is freed under a call in flight.

The close-during-a-call cases run in a subprocess (close_during_call.py), so
that a crash of the old binding (SIGSEGV, heap corruption) is a failed test
rather than the end of pytest."""

import gc
import os
import pathlib
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import stsa
from stsa import masks

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("case", ["context", "svg", "svg-with", "svg-finalizer",
                                  "session-context"])
def test_close_during_a_call_in_another_thread(case):
    package_root = pathlib.Path(stsa.__file__).resolve().parents[1]
    env = dict(os.environ, STSA_LIBRARY=stsa.library_path,
               PYTHONPATH=os.pathsep.join([str(package_root), str(HERE)]))
    got = subprocess.run([sys.executable, str(HERE / "close_during_call.py"), case],
                         env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0 and got.stdout.startswith("OK"), \
        f"exit status {got.returncode}\nstdout: {got.stdout}\nstderr: {got.stderr[-3000:]}"


def test_plan_keeps_its_context_alive():
    ctx = stsa.Context()
    plan = stsa.Plan(masks.causal(), 40, heads=2, ctx=ctx)
    alive = weakref.ref(ctx)
    del ctx
    gc.collect()
    assert alive() is not None and plan.context is alive()
    q = np.ones((1, 40, 2, 8), dtype=np.float32)
    assert np.isfinite(stsa.sparse_attention(q, q, q, plan=plan, layout="bshd")).all()


def test_plan_finalizer_takes_the_context_lock():
    """While a thread holds the context's lock (as a call does), a plan of
    that context is not released: its finalizer waits for the lock."""
    ctx = stsa.Context()
    plans = [stsa.Plan(masks.causal(), 40, heads=1, ctx=ctx)]
    with ctx.lock:
        t = threading.Thread(target=plans.clear)  # the last reference: finalizer runs
        t.start()
        t.join(0.3)
        assert t.is_alive(), "the plan was released while the context was in use"
    t.join()


def test_closed_default_context_is_replaced():
    q = np.ones((1, 8, 1, 4), dtype=np.float32)
    stsa.default_context().close()
    assert not stsa.default_context().closed
    assert np.isfinite(stsa.attention(q, q, q, layout="bshd")).all()
