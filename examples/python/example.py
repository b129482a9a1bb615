"""Runs a small agent-style program on ptc-engine with two Python tools.

    python example.py --server 127.0.0.1:50051 [--api-key KEY]
"""

import argparse
import sys

from ptc_client import PtcClient, Tool, pb

TEMPS = {"Paris": 18, "Oslo": 9, "Lisbon": 24, "Cairo": 31}


def get_weather(city):
    """Current temperature in a city, in Celsius."""
    if city not in TEMPS:
        raise KeyError(f"unknown city {city}")
    return {"city": city, "temp_c": TEMPS[city]}


def convert(celsius, unit="F"):
    """Converts a Celsius temperature to another unit."""
    return round(celsius * 9 / 5 + 32, 1) if unit == "F" else celsius + 273.15


TOOLS = [
    Tool(get_weather, parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]}),
    Tool(convert, name="convert-temp",
         parameters={"type": "object", "properties": {"celsius": {"type": "number"},
                                                      "unit": {"type": "string", "enum": ["F", "K"]}},
                     "required": ["celsius"]}),
]

PROGRAM = """
cities = ["Paris", "Oslo", "Lisbon", "Cairo", "Atlantis"]
results = await asyncio.gather(*[get_weather(city=c) for c in cities], return_exceptions=True)
ok = [r for r in results if not isinstance(r, Exception)]
for r in results:
    if isinstance(r, ToolError):
        print("skipped:", r)
warmest = max(ok, key=lambda r: r["temp_c"])
f = await convert_temp(celsius=warmest["temp_c"])
print(f"warmest: {warmest['city']} at {f} F")
return {"warmest": warmest["city"], "fahrenheit": f}
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--api-key")
    args = parser.parse_args()
    client = PtcClient(args.server, args.api_key)
    for tool in client.describe(TOOLS).tools:
        print("tool:", tool.signature)
    result = client.run(PROGRAM, TOOLS, on_output=lambda stream, data: print(data.decode(), end=""))
    if isinstance(result, pb.Completed):
        print("return value:", result.return_value_json)
        print("round trips:", result.stats.round_trips)
        return 0
    print(f"failed ({pb.FailureKind.Name(result.kind)}): {result.message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
