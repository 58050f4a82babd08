"""The README: its first program runs as written; its set-up reads in the order it runs."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_first_program_in_readme_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["loss"][0] < 0.5


def test_set_up_picks_the_torch_build_before_installing_and_says_what_the_tests_cost():
    text = README.read_text()
    setup = text[text.index("## Set up"):text.index("## A first program")]
    # read top to bottom, the torch build is chosen before anything installs torch
    assert setup.index("--index-url https://download.pytorch.org/whl/cpu") < \
        setup.index('-e ".[examples]"') < setup.index('-e ".[test]"')
    after = setup[setup.index('-e ".[test]"'):]
    assert re.search(r"takes about \d+ minutes on a quiet 2-core machine", after)
    assert '-m "not slow"' in after
