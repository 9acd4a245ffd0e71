"""The command blocks of the READMEs, as the README test runs them (and .ci/run reads them).

Selection rule, for editors: every fenced block whose info string is ``bash``, ``sh`` or
``python`` runs, in document order. Output, diagrams and tables use a plain fence (```) and
never run. A command block that must not run in the tests (it installs things, needs GPUs or
torchrun, or is a long timing benchmark) is preceded, on the line just before its fence, by

    <!-- readme-test: skip: REASON -->

The setup blocks (install, run the report, run the tests) are skipped with the reason
``.ci/run runs this block ...``: CI runs them, in order, as printed by

    python3 tests/readme_blocks.py README.md ci      # the blocks .ci/run runs, each ended by a NUL
    python3 tests/readme_blocks.py README.md python  # the README's Python blocks that run
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READMES = ("README.md", "calibration/README.md")
LANGUAGES = ("bash", "sh", "python")
SKIP = re.compile(r"^<!-- readme-test: skip: (?P<reason>\S.*?) -->$")
CI_REASON = ".ci/run runs this block"  # a skip reason starting so: CI runs the block instead
FENCE = re.compile(r"^```(?P<info>[\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    file: str
    line: int  # of the opening fence, 1-based
    language: str  # bash | sh | python | other info strings
    text: str
    skip_reason: str | None  # from the marker above the fence

    @property
    def runs(self) -> bool:
        return self.language in LANGUAGES and self.skip_reason is None

    @property
    def ci(self) -> bool:
        return self.language in LANGUAGES and (self.skip_reason or "").startswith(CI_REASON)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def blocks(file: str) -> list[Block]:
    lines = (REPO / file).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{file}:{i + 1}: a fence that is never closed")
        marker = SKIP.match(lines[i - 1]) if i else None
        out.append(Block(file, i + 1, opening["info"], "\n".join(lines[i + 1:end]) + "\n",
                         marker["reason"] if marker else None))
        i = end + 1
    return out


if __name__ == "__main__":
    file, which = sys.argv[1], sys.argv[2]
    if which == "ci":
        sys.stdout.write("".join(b.text + "\0" for b in blocks(file) if b.ci))  # NUL-ended, for mapfile -d 
    else:
        sys.stdout.write("\n".join(b.text for b in blocks(file) if b.runs and b.language == which))
