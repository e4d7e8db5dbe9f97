"""pytest setup for the stsa Python package.

Tests that need torch or diffusers skip themselves when those are missing
(whole modules, at collection); the numpy tests always run. pytest exits 5
when it collected no test; here a run whose modules were all skipped exits 0,
and one that found nothing at all exits 4 (a usage error): never 5."""

import os

import pytest

# Two threads at most: the CI machine has two cores, shared with other jobs.
os.environ.setdefault("STSA_TEST_THREADS", "2")


def pytest_report_header(config):
    try:
        import stsa
    except ImportError as e:  # reported by the tests themselves too
        return f"stsa: not importable ({e})"
    return (f"stsa {stsa.__version__}, libstsa {stsa.library_version} from "
            f"{stsa.library_path}, backend {stsa.default_context().backend}")


def pytest_sessionfinish(session, exitstatus):
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped") if reporter else None
    if skipped:
        session.exitstatus = pytest.ExitCode.OK
    else:
        print("\nstsa: no tests were collected (wrong path or -k?)")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


@pytest.fixture
def threads():
    return int(os.environ["STSA_TEST_THREADS"])
