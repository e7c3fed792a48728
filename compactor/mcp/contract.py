"""The tool contract: every tools/call is checked before its tool runs.

The SDK validates arguments laxly ("7" becomes 7, true becomes 1, unknown arguments are
dropped) and reports a failure as pydantic's multi-line dump with a URL. Here each call is
validated in pydantic strict mode against the tool's own argument model, and a wrong call is
answered as a tool error of plain sentences, one per wrong argument: which argument, what it
allows (read from the tool's published input schema), and what was sent.
"""

from __future__ import annotations

import copy
import inspect
import logging
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, get_args, get_origin

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError

from .. import bounds
from ..bounds import ARG_ECHO_CHARS
from . import sdk

# Arguments are scanned for lone surrogates this deep: bulk_store's items are a list of objects
# holding a list of tags, so 3 levels; deeper values are refused by the schemas anyway.
ARG_SCAN_DEPTH: Final = 3

log = logging.getLogger(__name__)

_MISSING = object()
_SANITY_CAP = 1_000_000  # a published maximum this high is a guard, not a choice for the model
_SURROGATE = re.compile("[\ud800-\udfff]")


def install(mcp: MCPServer) -> None:
    """Check every tools/call of `mcp` strictly, before the SDK's own (lax) validation, and word
    every tool error the same way."""

    accepts: dict[str, dict[str, Any]] = {}

    async def check_arguments(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.request_id is not None and ctx.params is not None:
            problem = call_problem(mcp, ctx.params, accepts)
            if problem is not None:
                # Argument names only: the rejected values are the caller's data.
                log.info("%s: arguments rejected", ctx.params.get("name"))
                return CallToolResult(content=[TextContent(type="text", text=problem)], is_error=True)
            return _plain_tool_error(ctx.params.get("name"), await call_next(ctx))
        return await call_next(ctx)

    mcp.middleware.append(check_arguments)
    for tool in sdk.registered_tools(mcp):
        # Error sentences say everything an argument accepts (null, a comma-separated string
        # for a list); the published schema is the lean one the model pays for in every prompt.
        accepts[tool.name] = copy.deepcopy(tool.parameters.get("properties", {}))
        lean_input(tool.parameters)
        tool.parameters["additionalProperties"] = False  # publish what is enforced


def lean_input(schema: dict[str, Any]) -> None:
    """The published input schema, in place, without what costs tokens and tells the model
    nothing: titles, `null` alternatives of optional arguments (omitting one is the way to not
    set it) and their null defaults, and lenient extra forms (a comma-separated string for a
    list) and string length limits: the stricter form is the one to use, the others are still
    accepted, and a call past a limit is answered with it."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        alternatives = prop.get("anyOf")
        if alternatives is not None:
            kept = [a for a in alternatives if a.get("type") not in ("null", "string")] or [
                a for a in alternatives if a.get("type") != "null"
            ]
            if len(kept) == 1:
                del prop["anyOf"]
                prop.update(kept[0])
        if "default" in prop and prop["default"] is None:
            del prop["default"]
        for bound in ("minLength", "maxLength"):  # limits far past any real use; errors name them
            prop.pop(bound, None)
        if prop.get("maximum", 0) >= _SANITY_CAP:
            del prop["maximum"]


def lean_output(schema: dict[str, Any]) -> None:
    """The published output schema, in place, without titles and descriptions: field names are
    the contract and say what they hold; the structure (types, required, nullable) is kept whole."""
    if isinstance(schema, dict):
        schema.pop("title", None)
        schema.pop("description", None)
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    lean_output(sub)
            elif isinstance(value, dict):
                lean_output(value)
            elif isinstance(value, list):
                for sub in value:
                    lean_output(sub)


def derived_output_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The output schema to publish for a tool function: what the SDK derives from its reply
    model, made lean. output_schemas.py holds these for every tool, so a start need not derive
    them; tests/test_contract.py checks that it still holds exactly this."""
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata

    schema = func_metadata(fn, structured_output=True).output_schema
    if schema is None:
        raise ValueError(f"{fn.__name__} declares no reply model")
    lean_output(schema)
    return schema


def derived_output_schemas(mcp: MCPServer) -> dict[str, dict[str, Any]]:
    """`derived_output_schema` of every tool `mcp` registers, by name in its order."""
    return {tool.name: derived_output_schema(tool.fn) for tool in sdk.registered_tools(mcp)}


def reply_model(fn: Callable[..., Any]) -> type[BaseModel]:
    """The reply model of a tool function: `M` of its `Annotated[CallToolResult, M]` return."""
    returns = inspect.signature(fn, eval_str=True).return_annotation
    args = get_args(returns)
    model = args[1] if get_origin(returns) is Annotated and len(args) == 2 else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(f"{fn.__name__} must return Annotated[CallToolResult, <reply model>]")
    return model


def _plain_tool_error(name: object, result: HandlerResult) -> HandlerResult:
    """The SDK words a tool's deliberate error "Error executing tool store: <message>": say
    "store: <message>", as the argument errors above do. The result arrives serialized."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return result
    content = result.get("content")
    head = f"Error executing tool {name}: "
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        if isinstance(text, str) and text.startswith(head):
            first = {**content[0], "text": f"{name}: {text[len(head) :]}"}
            return {**result, "content": [first, *content[1:]]}
    return result


def call_problem(
    mcp: MCPServer, params: Mapping[str, Any], accepts: Mapping[str, Mapping[str, Any]] | None = None
) -> str | None:
    """What is wrong with a tools/call's arguments, or None. Malformed params (no name, arguments
    not an object) and unknown tools are left to the SDK, which answers them already."""
    name, arguments = params.get("name"), params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    tool = sdk.get_tool(mcp, name)
    if tool is None:
        return None
    model = tool.fn_metadata.arg_model
    # The SDK parses a JSON string sent for a list or object argument (clients do send those);
    # keep accepting exactly what it accepts there.
    data = tool.fn_metadata.pre_parse_json(arguments)
    properties = (accepts or {}).get(name) or tool.parameters.get("properties", {})
    return arguments_problem(f"{name}: ", model, properties, data)


def arguments_problem(
    prefix: str,
    model: type[BaseModel],
    properties: Mapping[str, Any],
    data: Mapping[str, Any],
    *,
    path: str = "",
    noun: str = "argument",
) -> str | None:
    """One sentence per wrong argument of `data` for `model`, or None. Each sentence starts with
    `prefix` ("store: "), and names an argument as `path` + its name ("items[2].importance")."""
    accepted = [field.alias or name for name, field in model.model_fields.items()]
    unknown = [key for key in data if key not in accepted]
    if unknown:
        names = ", ".join(repr(path + k[:ARG_ECHO_CHARS]) for k in unknown[:5])
        takes = f"accepted: {', '.join(accepted)}" if accepted else "it takes no arguments"
        return f"{prefix}unknown {noun}{'s' if len(unknown) > 1 else ''} {names}; {takes}."
    try:
        model.model_validate(dict(data), strict=True)
    except ValidationError as exc:
        return " ".join(error_sentences(prefix, path, properties, data, exc))
    for arg, value in data.items():
        bad = _lone_surrogate(value)
        if bad is not None:
            # Over stdio the SDK refuses such a message whole; in-process it would be stored.
            return f"{prefix}{path}{arg} holds a lone surrogate (U+{ord(bad):04X}), which is not Unicode text."
    return None


def _lone_surrogate(value: Any, depth: int = 0) -> str | None:
    """The first lone surrogate in a string argument (or in the strings of a list or object)."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return found.group() if found else None
    if depth < ARG_SCAN_DEPTH and isinstance(value, list | dict):
        for v in value.values() if isinstance(value, dict) else value:
            bad = _lone_surrogate(v, depth + 1)
            if bad is not None:
                return bad
    return None


def error_sentences(
    prefix: str, path: str, properties: Mapping[str, Any], data: Mapping[str, Any], exc: ValidationError
) -> list[str]:
    """One sentence per argument named in `exc`, in the order pydantic found them."""
    sentences: list[str] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        arg = str(loc[0]) if loc else ""
        if arg in seen:
            continue  # a union reports one error per alternative: one sentence is enough
        seen.add(arg)
        schema = properties.get(arg, {})
        allowed = describe_schema(schema) if schema else "a valid value"
        value = data.get(arg, _MISSING)
        name = path + arg
        if value is _MISSING:
            sentences.append(f"{prefix}{name} is required: {allowed}.")
        elif err["type"] == "recursion_loop":
            sentences.append(f"{prefix}{name} is nested too deeply; it must be {allowed}.")
        else:
            sentences.append(prefix + bounds.must_be(name, allowed, value))
    return sentences


def describe_schema(schema: Mapping[str, Any]) -> str:
    """What a JSON schema allows, in words: 'an integer from 1 to 10', 'true, false or null'."""
    return bounds.either(_alternatives(schema))


def _alternatives(schema: Mapping[str, Any]) -> list[str]:
    if "anyOf" in schema:
        out: list[str] = []
        for sub in schema["anyOf"]:
            out.extend(a for a in _alternatives(sub) if a not in out)
        return out
    if "enum" in schema:
        return [bounds.one_of(schema["enum"])]
    kind = schema.get("type")
    if kind == "integer":
        return [bounds.integer(schema.get("minimum"), schema.get("maximum"))]
    if kind == "number":
        return [bounds.finite(schema.get("minimum"), schema.get("maximum"))]
    if kind == "string":
        return [bounds.string(schema.get("minLength"), schema.get("maxLength"))]
    if kind == "boolean":
        return ["true", "false"]
    if kind == "null":
        return ["null"]
    if kind == "array":
        items = schema.get("items", {})
        what = {"string": "strings", "object": "objects", "integer": "integers", "number": "numbers"}
        return [f"a list of {what.get(items.get('type'), 'values')}"]
    if kind == "object":
        return ["an object"]
    return ["a valid value"]
