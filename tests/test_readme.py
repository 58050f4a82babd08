"""The README's first program runs as written."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_first_program_in_readme_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["loss"][0] < 0.5
