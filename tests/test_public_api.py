import inspect
import subprocess
import sys

import pytest

import compactor
from tests.conftest import ROOT


def test_public_names_are_exactly_all():
    # Submodules become package attributes once anything imports them: not part of the surface.
    # Some names are imported on first use: dir() lists them, and getattr brings them in.
    public = {
        name for name in dir(compactor) if not name.startswith("_") and not inspect.ismodule(getattr(compactor, name))
    }
    assert public | {"__version__"} == set(compactor.__all__)
    for name in compactor.__all__:
        assert getattr(compactor, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        compactor.Nope  # noqa: B018


@pytest.mark.slow
def test_a_stdio_relay_imports_no_store():
    """`python -m compactor` relaying to the shared host must stay small: it imports neither
    the store nor numpy nor the MCP SDK (cli/relay.py)."""
    code = (
        "import sys; sys.argv = ['compactor', '--version']\n"
        "import compactor.cli, compactor.sharing.relay, compactor.scope\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'numpy', 'mcp', 'anyio', 'tiktoken'}\n"
        "               or m.startswith('compactor.store'))\n"
        "print(heavy)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_start_that_only_reads_compiles_no_classification(tmp_path):
    """A server's start (load, build, a query, a tag filter) leaves classify.py's patterns
    uncompiled; the first write brings them in."""
    seeded = compactor.Store(state_dir=tmp_path)
    seeded.store("Traceback: KeyError in parse_config", tags=["config"])
    seeded.close()
    code = (
        "import sys\n"
        "from compactor.store import Store\n"
        "from compactor.mcp.server import build_server\n"
        f"s = Store(state_dir={str(tmp_path)!r})\n"
        "build_server(s)\n"
        "assert s.query('parse_config', tags=['config'])\n"
        "print('compactor.content.classify' in sys.modules)\n"
        "s.store('def main():\\n    return 1\\n')\n"
        "print('compactor.content.classify' in sys.modules)\n"
        "s.close()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.split() == ["False", "True"]


@pytest.mark.slow
def test_reply_models_are_built_when_a_tool_first_replies(tmp_path):
    """Building the server leaves the reply models' validators unbuilt (pydantic's defer_build);
    a tool's first reply builds its own."""
    code = (
        "import anyio, inspect\n"
        "from mcp import Client\n"
        "from compactor.store import Store\n"
        "from compactor.mcp import schemas as S\n"
        "from compactor.mcp.server import build_server\n"
        "from pydantic import BaseModel\n"
        "models = [m for m in vars(S).values()\n"
        "          if inspect.isclass(m) and issubclass(m, BaseModel) and m.__module__ == S.__name__]\n"
        "server = build_server(Store())\n"
        "print(sum(m.__pydantic_complete__ for m in models), len(models) > 10)\n"
        "async def one():\n"
        "    async with Client(server, mode='legacy') as c:\n"
        "        assert not (await c.call_tool('status', {})).is_error\n"
        "anyio.run(one)\n"
        "print(S.StatusResult.__pydantic_complete__, S.QueryResult.__pydantic_complete__)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.split() == ["0", "True", "True", "False"]


def test_store_round_trip_through_the_public_api():
    s = compactor.Store()
    item = s.store("public api works").item
    assert isinstance(item, compactor.Item)
    assert s.get(item.id).content == "public api works"
