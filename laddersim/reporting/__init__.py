"""The one-command report (``laddersim report``): paper reproduction, a bandwidth what-if sweep,
a decode-step timeline, a planning example, multi-node, serving and pipeline sections, as Markdown
with figures. ``build_report`` loads the sections on first use (``laddersim.reporting.sections`` names
them without loading them)."""

__all__ = ["build_report"]


def __getattr__(name: str):
    if name == "build_report":
        from laddersim.reporting.build import build_report

        return build_report
    raise AttributeError(f"module 'laddersim.reporting' has no attribute {name!r}")
