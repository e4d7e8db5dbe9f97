"""Closes a context or an SVG session while another thread is inside a call.

Run as a script (test_close.py starts it in a subprocess, so that a crash
shows as a failed test instead of killing pytest): `python
close_during_call.py CASE`. The close is issued once the worker holds the
context's lock, i.e. while its call is in flight; the outcome the binding
promises is that close() waits: the call finishes with the right result,
then the object is closed (later calls raise "closed"). Prints "OK ..." and
exits 0 then. A binding that frees under the caller dies with SIGSEGV or an
abort, or fails the call, or returns garbage.

The reference backend on one thread makes the call last long enough (a
fraction of a second) for the close to arrive while it runs.
"""

import gc
import sys
import threading
import time

import numpy as np

import stsa

G = stsa.Geometry(8, 8, 16)  # N = 1024
H, D = 2, 64


def run_during(call, close, lock):
    """Runs call() on a worker thread and close() on this one while the
    worker holds `lock` (the context's: it holds it for the whole call).
    Returns the worker's result; raises what it raised."""
    outcome = []

    def worker():
        try:
            outcome.append(("done", call()))
        except BaseException as e:
            outcome.append(("raised", e))

    t = threading.Thread(target=worker)
    t.start()
    while t.is_alive():  # wait until the worker is inside the call
        if not lock.acquire(blocking=False):
            break
        lock.release()
        time.sleep(0.001)
    else:
        raise AssertionError("the call ended before it could be observed")
    close()
    t.join()
    kind, value = outcome[0]
    if kind == "raised":
        raise AssertionError(f"the call in flight failed: {value!r}") from value
    return value


def check(got, want):
    got = got[0] if isinstance(got, tuple) else got
    np.testing.assert_allclose(got, want, atol=2e-5)
    return "the call finished, then the close took effect"


def inputs():
    q, k, v, _ = stsa.workload(G, H, D, seed=4)
    return q, k, v


def case_context():
    q, k, v = inputs()
    want = stsa.attention(q, k, v, layout="bshd")
    ctx = stsa.Context(backend="ref", threads=1)
    got = run_during(lambda: stsa.attention(q, k, v, layout="bshd", ctx=ctx), ctx.close,
                     ctx.lock)
    result = check(got, want)
    try:
        stsa.attention(q, k, v, layout="bshd", ctx=ctx)
    except ValueError as e:
        assert "closed" in str(e), e
    else:
        raise AssertionError("a call on a closed context ran")
    return result


def svg_session():
    return stsa.SVG(G, heads=H, head_dim=D, density=0.4, sample_rows=32, backend="ref",
                    threads=1)


def svg_want(q, k, v):
    with stsa.SVG(G, heads=H, head_dim=D, density=0.4, sample_rows=32) as fast:
        return fast(q, k, v, layer=1, step=1, layout="bshd")[0]


def case_svg():
    q, k, v = inputs()
    want = svg_want(q, k, v)
    svg = svg_session()
    got = run_during(lambda: svg(q, k, v, layer=1, step=1, layout="bshd"), svg.close,
                     svg.context.lock)
    result = check(got, want)
    assert svg.closed and svg.context.closed
    try:
        svg(q, k, v, layer=1, step=1, layout="bshd")
    except ValueError as e:
        assert "closed" in str(e), e
    else:
        raise AssertionError("a call on a closed session ran")
    return result


def case_svg_with():
    q, k, v = inputs()
    want = svg_want(q, k, v)
    box = {}

    def close():
        box["svg"].__exit__(None, None, None)

    with svg_session() as svg:
        box["svg"] = svg
        got = run_during(lambda: svg(q, k, v, layer=1, step=1, layout="bshd"), close,
                         svg.context.lock)
    return check(got, want)


def case_svg_finalizer():
    """The session is garbage collected while another thread runs a dense
    call on its context: the finalizer must wait for that call."""
    q, k, v = inputs()
    want = stsa.attention(q, k, v, layout="bshd")
    svg = svg_session()
    ctx = svg.context
    box = [svg]
    del svg

    def drop():
        box.clear()
        gc.collect()

    got = run_during(lambda: stsa.attention(q, k, v, layout="bshd", ctx=ctx), drop,
                     ctx.lock)
    result = check(got, want)
    assert ctx.closed
    return result


def case_session_context():
    """A session's context cannot be closed under the session."""
    q, k, v = inputs()
    svg = svg_session()
    try:
        svg.context.close()
    except ValueError as e:
        assert "belongs to an stsa.SVG session" in str(e), e
    else:
        raise AssertionError("closed the context of a live session")
    out, _ = svg(q, k, v, layer=1, step=1, layout="bshd")
    np.testing.assert_allclose(out, svg_want(q, k, v), atol=2e-5)
    return "refused"


CASES = {"context": case_context, "svg": case_svg, "svg-with": case_svg_with,
         "svg-finalizer": case_svg_finalizer, "session-context": case_session_context}

if __name__ == "__main__":
    print("OK", CASES[sys.argv[1]]())
