"""A small ptc-engine client: run a program, answer its tool calls with plain Python functions.

Stubs are generated from ../../proto with grpcio-tools the first time they are needed, so the
client always matches the server's protos.

    client = PtcClient("127.0.0.1:50051", api_key=None)
    result = client.run(code, tools={"get_weather": get_weather})
"""

import json
import os
import queue
import sys
import threading

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "proto")
GEN_DIR = os.path.join(HERE, "_generated")


def _load_stubs():
    target = os.path.join(GEN_DIR, "ptc", "v1")
    if not os.path.exists(os.path.join(target, "sandbox_pb2_grpc.py")):
        from grpc_tools import protoc

        os.makedirs(GEN_DIR, exist_ok=True)
        args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={GEN_DIR}", f"--grpc_python_out={GEN_DIR}",
                os.path.join(PROTO_DIR, "ptc", "v1", "sandbox.proto")]
        if protoc.main(args) != 0:
            raise RuntimeError("generating the gRPC stubs failed")
    if GEN_DIR not in sys.path:
        sys.path.insert(0, GEN_DIR)
    from ptc.v1 import sandbox_pb2, sandbox_pb2_grpc
    return sandbox_pb2, sandbox_pb2_grpc


pb, pb_grpc = _load_stubs()


class Tool:
    """A Python function offered to the program, with its description and JSON Schema."""

    def __init__(self, fn, description="", parameters=None, name=None):
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description or (fn.__doc__ or "").strip()
        self.parameters = parameters


class PtcClient:
    def __init__(self, target, api_key=None):
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.SandboxStub(self.channel)
        self.metadata = [("x-api-key", api_key)] if api_key else []

    def describe(self, tools):
        request = pb.DescribeToolsRequest(tools=[_wire_tool(t) for t in tools])
        return self.stub.DescribeTools(request, metadata=self.metadata)

    def run(self, code, tools=(), timeout_ms=None, on_output=None):
        """Runs `code`; returns the final Completed or Failed message. Tool calls of one batch
        are answered together; `on_output(stream, bytes)` sees output as it is produced."""
        by_name = {t.name: t for t in tools}
        outbox = queue.Queue()
        limits = pb.Limits(timeout_ms=timeout_ms) if timeout_ms else None
        outbox.put(pb.ClientMessage(start=pb.Start(code=code, tools=[_wire_tool(t) for t in tools], limits=limits)))
        responses = self.stub.Execute(iter(outbox.get, None), metadata=self.metadata)
        try:
            for message in responses:
                kind = message.WhichOneof("message")
                if kind == "output" and on_output:
                    on_output("stderr" if message.output.stream == pb.OUTPUT_STREAM_STDERR else "stdout",
                              message.output.data)
                elif kind == "tool_calls":
                    results = [_answer(by_name, call) for call in message.tool_calls.calls]
                    outbox.put(pb.ClientMessage(tool_results=pb.ToolResults(results=results)))
                elif kind in ("completed", "failed"):
                    return getattr(message, kind)
                elif kind == "error":
                    print(f"server: {message.error.code}: {message.error.message}", file=sys.stderr)
        finally:
            outbox.put(None)
        raise RuntimeError("the stream ended without a result")


def _wire_tool(tool):
    params = json.dumps(tool.parameters) if tool.parameters is not None else ""
    return pb.Tool(name=tool.name, description=tool.description, parameters_json=params)


def _answer(by_name, call):
    tool = by_name.get(call.name)
    try:
        if tool is None:
            raise LookupError(f"no such tool: {call.name}")
        value = tool.fn(**json.loads(call.input_json))
        return pb.ToolResult(call_id=call.id, result_json=json.dumps(value))
    except Exception as e:  # the tool failed: the program sees a ToolError
        return pb.ToolResult(call_id=call.id, error=f"{type(e).__name__}: {e}")
