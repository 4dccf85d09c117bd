"""The README's pipeline listing is the shipped default pipeline, not a copy that drifts from it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_shows_the_shipped_bird_pipeline():
    readme = (ROOT / "README.md").read_text()
    listing = re.search(r"```yaml\n(name: bird-grpo\n.*?)```", readme, re.S)
    assert listing, "README.md has no ```yaml block starting with 'name: bird-grpo'"
    shipped = (ROOT / "pipelines" / "bird_grpo.yaml").read_text()
    assert listing.group(1) == shipped[shipped.index("name: bird-grpo"):], \
        "README.md's pipeline listing differs from pipelines/bird_grpo.yaml (below its header comment): copy it over"
