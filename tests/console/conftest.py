"""Fixtures of the console's browser tests: a Chromium per test, and on failure a
screenshot of every page it had open, in a temporary directory named in the report."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.console.browser import Browser, chromium


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test item, so a fixture can tell it failed."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
async def browser(request: pytest.FixtureRequest) -> AsyncIterator[Browser]:
    async with chromium() as opened:
        yield opened
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            folder = await opened.screenshot_all(request.node.name)
            print(f"\nscreenshots of every open page: {folder}")
            report.sections.append(("console screenshots", str(folder)))
