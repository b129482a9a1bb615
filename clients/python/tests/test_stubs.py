"""The committed protobuf modules are what `generate.py` makes from the repository's proto today."""

import filecmp
import importlib.util
import pathlib
import tempfile

HERE = pathlib.Path(__file__).resolve().parent.parent


def test_the_committed_stubs_match_the_proto():
    spec = importlib.util.spec_from_file_location("generate", HERE / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    committed = HERE / "src" / "ptc_engine" / "_proto"
    with tempfile.TemporaryDirectory() as out:
        generate.generate(out)
        fresh = pathlib.Path(out) / "ptc_engine" / "_proto"
        for name in ("sandbox_pb2.py", "sandbox_pb2.pyi"):
            assert filecmp.cmp(fresh / name, committed / name, shallow=False), (
                f"{name} differs from what generate.py makes from proto/: run `python generate.py` in clients/python"
            )
