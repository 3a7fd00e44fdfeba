"""Renderers of an analysis: terminal (rich), Markdown, and one self-contained HTML file."""

from specscope.report.context import ReportContext, context_from_run
from specscope.report.html import render_html, write_html
from specscope.report.markdown import render_markdown, write_markdown
from specscope.report.terminal import render_plan, render_terminal

__all__ = [
    "ReportContext",
    "context_from_run",
    "render_html",
    "render_markdown",
    "render_plan",
    "render_terminal",
    "write_html",
    "write_markdown",
]
