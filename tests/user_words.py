"""Words meant for developers that no user-facing output may carry (tests/test_user_words.py
greps every --help with it, tests/test_readme.py every README command's output)."""

from __future__ import annotations

import re

# reST roles and literals, the developers' shared reference folder, the project's issue numbers,
# kineto's log lines (USDT:/STAGE: ... SomeFile.cpp:52]) and tracebacks.
DEVELOPER_WORDS = re.compile(r"``|:(?:func|class|mod|meth|attr|data|ref):`|\.\./shared|\b[Ii]ssue \d+\b|\bUSDT:"
                             r"|\bSTAGE:|\w+\.cpp:\d+\]|Traceback \(most recent")


def developer_words(text: str) -> list[str]:
    """The offending lines of ``text``."""
    return [line for line in text.splitlines() if DEVELOPER_WORDS.search(line)]
