"""The one-command report (``laddersim report``): paper reproduction, a bandwidth what-if sweep,
a decode-step timeline and a planning example, as Markdown with figures."""

from laddersim.report.build import build_report

__all__ = ["build_report"]
