"""Headless-Chromium harness for tests of self-contained HTML pages (e.g. vtrepro's report.html).

Drives the system's Chromium (Debian package ``chromium``; ``.ci/run`` installs it) through Playwright's
Python driver, opens a page from disk (file://), writes a full-page PNG screenshot and reports what a reader
would see broken: console errors and uncaught script errors, failed or external requests, images that did
not decode, and the tables with their row counts.

Playwright is used only as the driver: its own browser downloads (``playwright install``) are never needed.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser as _PlaywrightBrowser
    from playwright.sync_api import Playwright, ViewportSize

CHROMIUM_ENV = "VTREPRO_CHROMIUM"
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking")
INSTALL_HINT = (
    "headless Chromium is needed: `apt-get install -y chromium` (Debian; `.ci/run` does it) or set "
    f'{CHROMIUM_ENV}=/path/to/chromium, and `pip install -e ".[test]"` for playwright'
)
_SRC_PREFIX = 80  # characters of a data: URI kept in reports

# Runs in the page after "load": makes lazy images eager, waits (bounded) for every image to settle,
# then describes the images and tables.
_INSPECT_JS = """
async (timeoutMs) => {
  const imgs = Array.from(document.images);
  for (const img of imgs) { if (img.loading === "lazy") img.loading = "eager"; }
  const settle = (img) => img.complete ? Promise.resolve() : new Promise((done) => {
    img.addEventListener("load", done, { once: true });
    img.addEventListener("error", done, { once: true });
  });
  await Promise.race([
    Promise.all(imgs.map(settle)),
    new Promise((done) => setTimeout(done, timeoutMs)),
  ]);
  const box = (el) => el.getBoundingClientRect();
  return {
    title: document.title,
    images: imgs.map((img) => ({
      src: img.getAttribute("src") || "",
      alt: img.getAttribute("alt") || "",
      naturalWidth: img.naturalWidth,
      naturalHeight: img.naturalHeight,
      complete: img.complete,
    })),
    tables: Array.from(document.querySelectorAll("table")).map((t) => ({
      rows: t.rows.length,
      width: box(t).width,
      height: box(t).height,
    })),
  };
}
"""


def find_chromium() -> str | None:
    """The Chromium executable: ``$VTREPRO_CHROMIUM`` if set, else ``chromium`` (or a known alias) on PATH."""
    configured = os.environ.get(CHROMIUM_ENV)
    if configured:
        return shutil.which(configured)
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Image:
    """One ``<img>`` after the page loaded: its src (first characters) and alt, decoded size, and state."""

    src: str
    alt: str
    natural_width: int
    natural_height: int
    complete: bool

    @property
    def broken(self) -> bool:
        """Not decoded: finished loading with no pixels (bad data, missing file) or never finished."""
        return not self.complete or self.natural_width == 0 or self.natural_height == 0

    def __str__(self) -> str:
        label = f"alt={self.alt!r} " if self.alt else ""
        return f"<img {label}src={self.src!r}>"


@dataclass(frozen=True)
class Table:
    """One ``<table>``: its row count (header rows included) and laid-out size in CSS pixels."""

    rows: int
    width: float
    height: float

    @property
    def rendered(self) -> bool:
        return self.width > 0 and self.height > 0


@dataclass
class Rendering:
    """What a headless Chromium made of one page."""

    title: str
    screenshot: Path
    console_errors: list[str] = field(default_factory=list)  # console.error messages and uncaught errors
    failed_requests: list[str] = field(default_factory=list)  # "url: reason" (file not found, HTTP >= 400, ...)
    external_requests: list[str] = field(default_factory=list)  # anything but file:/data:/blob:, blocked
    images: list[Image] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    probe: Any = None  # what the caller's ``probe`` script returned, after the page settled

    @property
    def broken_images(self) -> list[Image]:
        return [image for image in self.images if image.broken]

    @property
    def problems(self) -> list[str]:
        """Every failure a reader would notice, one line each; empty for a page that rendered cleanly."""
        return (
            [f"console error: {text}" for text in self.console_errors]
            + [f"failed request: {text}" for text in self.failed_requests]
            + [f"external request (a self-contained page makes none): {url}" for url in self.external_requests]
            + [f"broken image: {image}" for image in self.broken_images]
        )


def _short(url: str) -> str:
    """A URL for reports: data: URIs cut to their first characters, other URLs whole."""
    return url[:_SRC_PREFIX] + "..." if url.startswith("data:") and len(url) > _SRC_PREFIX else url


def _is_local(url: str) -> bool:
    return url.startswith(("file:", "data:", "blob:", "about:"))


class Browser:
    """One headless Chromium shared by several renderings; a context manager (or call :meth:`close`)."""

    def __init__(self, executable: str | None = None, *, viewport: tuple[int, int] = (1280, 800),
                 timeout_s: float = 30.0) -> None:
        executable = executable or find_chromium()
        if executable is None:
            raise FileNotFoundError(f"Chromium not found; {INSTALL_HINT}")
        from playwright.sync_api import sync_playwright  # ImportError when the test extras are missing

        self.executable = executable
        self.viewport: ViewportSize = {"width": viewport[0], "height": viewport[1]}
        self.timeout_ms = timeout_s * 1000
        self._playwright: Playwright = sync_playwright().start()
        try:
            self._browser: _PlaywrightBrowser = self._playwright.chromium.launch(
                executable_path=executable, headless=True, args=list(CHROMIUM_ARGS), timeout=self.timeout_ms
            )
        except BaseException:
            self._playwright.stop()
            raise

    @property
    def version(self) -> str:
        return self._browser.version

    def render(self, html: Path, screenshot: Path, probe: str | None = None) -> Rendering:
        """Open ``html`` from disk, wait for it and its images, write a full-page PNG to ``screenshot``;
        ``probe``, a JavaScript function, then runs in the page and its result is kept."""
        html = Path(html).resolve()
        if not html.is_file():
            raise FileNotFoundError(html)
        screenshot = Path(screenshot)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        console_errors: list[str] = []
        failed: list[str] = []
        external: list[str] = []

        def on_console(message: Any) -> None:
            if message.type == "error":
                where = message.location.get("url", "")
                console_errors.append(f"{message.text} ({_short(where)})" if where else message.text)

        def on_page_error(error: Any) -> None:
            console_errors.append(f"uncaught {getattr(error, 'name', '') or 'Error'}: {getattr(error, 'message', error)}")

        def on_request_failed(request: Any) -> None:
            failed.append(f"{_short(request.url)}: {request.failure or 'failed'}")

        def on_response(response: Any) -> None:
            if response.status >= 400:
                failed.append(f"{_short(response.url)}: HTTP {response.status}")

        def block_external(route: Any) -> None:
            external.append(_short(route.request.url))
            route.abort()

        context = self._browser.new_context(viewport=self.viewport, device_scale_factor=1, java_script_enabled=True)
        try:
            context.set_default_timeout(self.timeout_ms)
            context.route(lambda url: not _is_local(url), block_external)
            page = context.new_page()
            page.on("console", on_console)
            page.on("pageerror", on_page_error)
            page.on("requestfailed", on_request_failed)
            page.on("response", on_response)
            page.goto(html.as_uri(), wait_until="load")
            found = page.evaluate(_INSPECT_JS, self.timeout_ms)
            probed = page.evaluate(probe) if probe else None
            page.screenshot(path=str(screenshot), full_page=True, animations="disabled")
        finally:
            context.close()
        return Rendering(
            title=found["title"],
            screenshot=screenshot,
            console_errors=console_errors,
            failed_requests=failed,
            external_requests=external,
            images=[
                Image(_short(i["src"]), i["alt"], int(i["naturalWidth"]), int(i["naturalHeight"]), bool(i["complete"]))
                for i in found["images"]
            ],
            tables=[Table(int(t["rows"]), float(t["width"]), float(t["height"])) for t in found["tables"]],
            probe=probed,
        )

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()


def render(html: Path, screenshot: Path, *, executable: str | None = None) -> Rendering:
    """One page in a browser of its own (tests share one through the ``browser_render`` fixture)."""
    with Browser(executable) as browser:
        return browser.render(html, screenshot)
