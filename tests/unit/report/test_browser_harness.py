"""The browser harness (tests/browser.py) sees what it must: a clean page is clean, a broken one is not."""
from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_png(width: int, height: int) -> bytes:
    """A real RGB PNG: a horizontal blue-to-red gradient."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = bytes(c for x in range(width) for c in (255 * x // max(width - 1, 1), 64, 255 - 255 * x // max(width - 1, 1)))
    raw = b"".join(b"\x00" + row for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE, data[:8]
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def page(tmp_path: Path, body: str, title: str = "harness") -> Path:
    html = tmp_path / "report.html"
    html.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>table{border-collapse:collapse} td,th{border:1px solid #888;padding:4px 8px}</style>"
        f"</head><body>{body}</body></html>"
    )
    return html


TABLE = (
    "<table><thead><tr><th>run</th><th>nDCG@10</th></tr></thead>"
    "<tbody><tr><td>baseline</td><td>0.671</td></tr><tr><td>transfer</td><td>0.664</td></tr></tbody></table>"
)


def test_clean_page_renders_table_image_and_screenshot(tmp_path, browser_render):
    html = page(tmp_path, f"<h1>Report</h1>{TABLE}<img alt='gradient' src='{data_uri(make_png(40, 30))}'>", "clean")
    shot = tmp_path / "shot.png"

    rendering = browser_render(html, shot)

    assert rendering.problems == []
    assert rendering.title == "clean"
    assert [(t.rows, t.rendered) for t in rendering.tables] == [(3, True)]
    [image] = rendering.images
    assert (image.alt, image.natural_width, image.natural_height, image.complete) == ("gradient", 40, 30, True)
    assert image.src.startswith("data:image/png;base64,") and not image.broken
    assert rendering.broken_images == []
    data = shot.read_bytes()
    width, height = png_size(data)
    assert width == 1280 and height >= 30, (width, height)
    assert len(data) > 2_000, len(data)


def test_broken_images_are_reported(tmp_path, browser_render):
    garbage = "data:image/png;base64," + base64.b64encode(b"not a png at all" * 8).decode("ascii")
    body = (
        f"{TABLE}<img alt='ok' src='{data_uri(make_png(8, 8))}'>"
        f"<img alt='garbage' src='{garbage}'><img alt='missing' src='missing.png'>"
    )

    rendering = browser_render(page(tmp_path, body), tmp_path / "shot.png")

    assert [image.alt for image in rendering.broken_images] == ["garbage", "missing"]
    assert all(image.complete and image.natural_width == 0 for image in rendering.broken_images)
    assert [image.alt for image in rendering.images if not image.broken] == ["ok"]
    assert len(rendering.failed_requests) == 1 and "missing.png" in rendering.failed_requests[0]
    assert any("broken image" in line and "garbage" in line for line in rendering.problems)
    assert (tmp_path / "shot.png").stat().st_size > 0


def test_script_errors_are_reported(tmp_path, browser_render):
    body = f"{TABLE}<script>console.error('logged failure')</script><script>throw new Error('x')</script>"

    rendering = browser_render(page(tmp_path, body), tmp_path / "shot.png")

    assert any(line.startswith("uncaught Error: x") for line in rendering.console_errors), rendering.console_errors
    assert any("logged failure" in line for line in rendering.console_errors), rendering.console_errors
    assert rendering.broken_images == [] and [t.rows for t in rendering.tables] == [3]


def test_external_requests_are_blocked_and_reported(tmp_path, browser_render):
    body = f"{TABLE}<img alt='remote' src='http://example.invalid/plot.png'>"

    rendering = browser_render(page(tmp_path, body), tmp_path / "shot.png")

    assert rendering.external_requests == ["http://example.invalid/plot.png"]
    assert [image.alt for image in rendering.broken_images] == ["remote"]
