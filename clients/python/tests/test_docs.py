"""The code blocks of the README and of docs/ run as written, each page as a script in a process
of its own, in the run's mode (conftest.py): the script inherits the environment, so it takes
the server from `PTC_ENGINE_URL` / `PTC_ENGINE_API_KEY` as a user's would, and without them
runs its programs in its own process. Blocks fenced ` ```python ` run, in order, as one script
per page; ` ```py ` blocks need a real model and are not run. Each page's output must show
what its comments promise."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent.parent

EXPECTED = {
    "README.md": ["Cairo 87.8\n", "{'city': 'Cairo', 'temp': 31}\n", "2 ['get_weather', 'get_weather', 'convert']\n",
                  "2\n[1, 2, 3]\n{'out.txt': b'2'}\nline 0\nline 1\nline 2\n", "42\nsorted: [1, 2, 3]\n"],
    "docs/fastmcp.md": ['{"A1":9.5}\n'],
    "docs/pydantic-ai.md": ["The program returned {'output': 'checked 3\\n', 'result': 'Cairo'}\n"],
    "docs/agent-framework.md": ['Cairo in F: 87.8\n\n{"difference": 27}\n'],
    "docs/langchain.md": ["31°C at 13:00\n"],
    "docs/strands.md": ["warmer: Cairo\n", "0 2\n"],
}


def script(page):
    text = (HERE / page).read_text()
    return "\n\n".join(re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M))


def run_page(page):
    code = script(page)
    assert code, f"{page} has no python block"
    # Where the page's `Sandbox()`s ran: the run's mode, from the environment the script got.
    code += "\n\nimport ptc_engine as _ptc\nprint('ran:', _ptc.Sandbox().url)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{page}:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.endswith(f"ran: {os.environ.get('PTC_ENGINE_URL') or 'in-process'}\n"), done.stdout
    for expected in EXPECTED[page]:
        assert expected in done.stdout, f"{page} printed:\n{done.stdout}"


@pytest.mark.parametrize("page", [p for p in EXPECTED if p != "docs/strands.md"])
def test_the_page_runs_as_written(page):
    run_page(page)
