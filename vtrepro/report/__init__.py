"""The comparison report: published tables beside observed results, efficiency, plots (markdown, HTML, CSV)."""
