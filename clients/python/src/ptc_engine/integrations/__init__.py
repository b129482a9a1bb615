"""ptc-engine inside the agent frameworks' code modes, each in the framework's own extension
shape, so that switching from Monty is one line:

- `ptc_engine.integrations.fastmcp`: `PtcSandboxProvider` for FastMCP's `CodeMode`.
- `ptc_engine.integrations.pydantic_ai`: `PtcCodeMode`, Pydantic AI harness' `CodeMode` capability.
- `ptc_engine.integrations.strands`: `ptc_tool_caller` (Strands' programmatic tool caller) and
  `PtcSandbox` (a `strands.sandbox.Sandbox`).
- `ptc_engine.integrations.agent_framework`: `PtcCodeActProvider` and `PtcExecuteCodeTool` for
  Microsoft Agent Framework.
- `ptc_engine.integrations.langchain`: `ptc_code_tool`, a LangChain tool running a program over
  LangChain tools.

Each module imports its framework, installed with the matching extra
(`pip install "ptc-engine[fastmcp]"`, ...).
"""
