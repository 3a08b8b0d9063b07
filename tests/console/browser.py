"""Debian's Chromium driven by Playwright, for the console's tests and its screenshot.

Playwright's own browser download does not work on these machines; the Makefile installs
Debian's ``chromium`` instead, and it is launched here headless with the flags that keep
it off the network (background networking, component updates and sync would each try to
reach Google's hosts). Every page opened through :class:`Browser` can be saved as a PNG
(``screenshot_all``), which the tests do on failure.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import BrowserContext, Page, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


class Browser:
    """One browser context; every page it opens is remembered for screenshots."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.pages: list[Page] = []

    async def new_page(self) -> Page:
        page = await self.context.new_page()
        self.pages.append(page)
        return page

    async def screenshot_all(self, label: str) -> Path:
        """A PNG of every open page in a new temporary directory; returns it."""
        safe = re.sub(r"[^\w.-]", "_", label)
        folder = Path(tempfile.mkdtemp(prefix=f"console-{safe}-"))
        for i, page in enumerate(self.pages):
            if not page.is_closed():
                await page.screenshot(path=folder / f"page-{i}.png", full_page=True)
        return folder


def _executable() -> str:
    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: `make test` installs it (apt chromium)")
    return str(CHROMIUM)


@asynccontextmanager
async def chromium(width: int = 1360, height: int = 900) -> AsyncIterator[Browser]:
    """A fresh headless Chromium (its own empty profile), closed at the end."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=_executable(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = await browser.new_context(viewport={"width": width, "height": height})
            yield Browser(context)
        finally:
            await browser.close()
