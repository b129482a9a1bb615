"""Generates the protobuf modules in src/ptc_engine/_proto from the repository's proto/ (run it after
changing the proto; `tests/test_stubs.py` fails while the committed stubs differ from what this
makes):

    python -m pip install grpcio-tools==1.85.1
    python generate.py [OUT_DIR]

The proto is copied to `ptc_engine/_proto/sandbox.proto` first, so that the generated modules
import each other as `ptc_engine._proto.sandbox_pb2` (the wire names stay `ptc.v1.*`).
"""

import os
import shutil
import sys
import tempfile

from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto", "ptc", "v1", "sandbox.proto")


def generate(out_dir):
    with tempfile.TemporaryDirectory() as tmp:
        package = os.path.join(tmp, "ptc_engine", "_proto")
        os.makedirs(package)
        shutil.copy(PROTO, os.path.join(package, "sandbox.proto"))
        os.makedirs(out_dir, exist_ok=True)
        args = [
            "protoc",
            f"-I{tmp}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            os.path.join(package, "sandbox.proto"),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "src")
    generate(out)
