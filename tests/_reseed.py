"""`pytest --reseed N`: run each test that draws a random seed (`_scenes.make_rng`) up to N
times, each time with a fresh seed, so a bound that holds for most seeds but not for all
shows up before a single run happens to draw the bad one.

A test is repeated only while it passes and draws a seed; its first failing run is the one
reported, with the seed (`SPLAT_TEST_SEED=<seed> pytest <test>` replays it). Otherwise the
last run is reported, so each test still reports once. `--reseed-seconds S` stops repeating
a test after about S seconds. The session ends with a line per test that failed, and a
count of the runs. The options are declared in conftest.py."""
from __future__ import annotations

import os
import random
import time

import pytest
from _pytest.runner import runtestprotocol

ENV = "SPLAT_TEST_SEED"


def configure(config) -> None:
    runs = config.getoption("reseed")
    if runs < 1:
        raise pytest.UsageError(f"--reseed: {runs} runs; give a count of 1 or more")
    if os.environ.get(ENV):
        raise pytest.UsageError(f"--reseed draws its own seeds: unset {ENV} (it fixes one)")
    config.pluginmanager.register(Reseed(runs, config.getoption("reseed_seconds")), "splat-reseed")


class Reseed:
    def __init__(self, runs: int, seconds: float):
        self.runs, self.seconds = runs, seconds
        self.seeded = 0          # tests that drew a seed
        self.total = 0           # runs of those tests
        self.failed: list[tuple[str, int]] = []
        self._random = random.Random()
        # Imported here, not with the conftest: _scenes imports splat, which the installed-
        # package check must find first.
        import _scenes
        self._scenes = _scenes

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        start, runs = time.monotonic(), 0
        try:
            while True:
                seed = self._random.getrandbits(63)
                os.environ[ENV] = str(seed)
                drawn = self._scenes.seeds_drawn()
                # Tear down only the test's own fixtures between runs: function-scoped ones
                # (tmp_path) are made afresh, module and session ones are kept.
                reports = runtestprotocol(item, nextitem=item.parent, log=False)
                runs += 1
                seeded = self._scenes.seeds_drawn() > drawn
                failed = any(r.failed for r in reports)
                spent = time.monotonic() - start
                if (failed or not seeded or runs >= self.runs or any(r.skipped for r in reports)
                        or spent * (runs + 1) / runs > self.seconds):
                    break
        finally:
            os.environ.pop(ENV, None)
        if seeded:
            self.seeded += 1
            self.total += runs
        if failed:
            self.failed.append((item.nodeid, seed))
            for r in reports:
                if r.failed:
                    r.sections.append(("reseed", f"failed on run {runs} of {item.nodeid}: {ENV}={seed} replays it"))
        for r in reports:
            item.ihook.pytest_runtest_logreport(report=r)
        # The fixtures the next test does not share (pytest's own step after the last run).
        item.session._setupstate.teardown_exact(nextitem)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.write_sep("-", "reseed")
        tr.write_line(f"{self.seeded} tests drew seeds: {self.total} runs (up to {self.runs} each, "
                      f"about {self.seconds:g} s each at most)")
        for nodeid, seed in self.failed:
            tr.write_line(f"{ENV}={seed} pytest '{nodeid}'")
