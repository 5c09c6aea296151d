"""pytest configuration for the scralloc Python tests.

Hypothesis profiles:
  ci   (default)                 derandomized, no example database, bounded
  long (SCRALLOC_HYPOTHESIS_LONG=1) many more examples and longer runs

SCRALLOC_EXPECT_DEBUG=1 (set by `make test-python`) makes the run fail early
unless the imported extension is the checked build (SCR_DEBUG=3).
"""
import os
import sys

import pytest

try:
    import scralloc  # noqa: F401
except ImportError:  # a checkout with no install: `make python`'s checked build, else in place
    _root = os.path.join(os.path.dirname(__file__), "..", "..")
    sys.path[:0] = [os.path.join(_root, "build", "python", "debug-lib"),
                    os.path.join(_root, "bindings", "python")]
    import scralloc  # noqa: F401

from hypothesis import HealthCheck, settings

LONG = os.environ.get("SCRALLOC_HYPOTHESIS_LONG", "") not in ("", "0")

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    stateful_step_count=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "long",
    deadline=None,
    max_examples=2000,
    stateful_step_count=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
PROFILE = "long" if LONG else os.environ.get("SCRALLOC_HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_report_header(config):
    return (
        f"scralloc {scralloc.__version__} from {os.path.dirname(scralloc.__file__)}, "
        f"SCR_DEBUG={scralloc.DEBUG}, process allocator: {scralloc.HAVE_PROCESS}, "
        f"hypothesis profile: {PROFILE}"
    )


def pytest_configure(config):
    if os.environ.get("SCRALLOC_EXPECT_DEBUG", "") not in ("", "0") and scralloc.DEBUG < 3:
        raise pytest.UsageError(
            f"SCRALLOC_EXPECT_DEBUG is set but {scralloc.__file__} is a release build "
            f"(SCR_DEBUG={scralloc.DEBUG}); rebuild with SCRALLOC_DEBUG_BUILD=1"
        )


@pytest.fixture
def a():
    """A fresh allocator, validated and closed after the test."""
    alloc = scralloc.Allocator()
    yield alloc
    if not alloc.closed:
        alloc.validate()
        alloc.close()


@pytest.fixture(autouse=True)
def _no_injected_failure():
    yield
    scralloc.debug_fail_os_call(0)
