"""What the integrations' tests share: `private_api`, the check of a framework's names outside its
public API (private modules, `_names`) that an integration relies on. Each integration's test
file lists the names its module uses; when a release of the framework moves or changes one, the
test fails naming the framework, its installed version and the name, rather than the
integration failing somewhere inside a run. And `sandboxes`, the `Sandbox`es a test's
integrations made: given `sandbox=url` with `url` None (no `PTC_ENGINE_URL`), an integration
must run its programs in this process, as `Sandbox()` does, and not look for a server."""

import dataclasses
import importlib
import importlib.metadata
import inspect
from typing import Any, NoReturn

import pytest

from ptc_engine import Sandbox


class PrivateApi:
    """The private names of the framework `distribution` (its PyPI name) that the module
    `integration` relies on."""

    def __init__(self, distribution: str, integration: str) -> None:
        self.distribution = distribution
        self.version = importlib.metadata.version(distribution)
        self.integration = integration

    def fail(self, name: str, problem: str) -> NoReturn:
        pytest.fail(
            f"{self.distribution} {self.version}: {name} {problem}; {self.integration} relies on it. Hold "
            f"{self.distribution} to a release that has it (the extra's bounds in pyproject.toml) or change "
            f"{self.integration} for this one.",
            pytrace=False,
        )

    def get(self, module: str, name: str | None = None) -> Any:
        """The module `module` (a dotted path), or its attribute `name`."""
        try:
            found = importlib.import_module(module)
        except ImportError as e:
            self.fail(module, f"cannot be imported ({e})")
        if name is None:
            return found
        if not hasattr(found, name):
            self.fail(f"{module}.{name}", "is gone")
        return getattr(found, name)

    def has(self, owner: Any, where: str, *names: str) -> None:
        """`owner` (found at `where`) has the attributes `names` (dataclass fields count)."""
        fields = {f.name for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else set()
        for name in names:
            if name not in fields and not hasattr(owner, name):
                self.fail(f"{where}.{name}", "is gone")

    def takes(self, function: Any, where: str, *parameters: str) -> None:
        """`function` (found at `where`) takes `parameters` first, in this order (`self` aside)."""
        if not callable(function):
            self.fail(where, f"is no longer callable (it is {type(function).__name__})")
        names = [p for p in inspect.signature(function).parameters if p != "self"]
        if names[: len(parameters)] != list(parameters):
            self.fail(where, f"takes ({', '.join(names)}), not ({', '.join(parameters)}, ...)")


@pytest.fixture
def private_api() -> type[PrivateApi]:
    return PrivateApi


@pytest.fixture
def sandboxes(monkeypatch) -> list[Sandbox]:
    """Every `Sandbox` made while the test runs (on any thread: Strands runs its tools in
    threads). Each integration's test file checks once that those its integration made are the
    run's mode: `{s.url for s in sandboxes} == {url or "in-process"}`."""
    made: list[Sandbox] = []
    init = Sandbox.__init__

    def recorded(self: Sandbox, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Sandbox, "__init__", recorded)
    return made
