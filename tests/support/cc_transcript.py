"""Build transcripts in Claude Code's JSONL shape (~/.claude/projects/<slug>/<session>.jsonl):
one JSON object per line, `type` user/assistant, `message.content` a string or a list of
blocks (text, tool_use, tool_result), chained by uuid/parentUuid."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any


class Transcript:
    def __init__(self, session_id: str, cwd: str = "/home/me/shop") -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.lines: list[str] = []
        self._parent: str | None = None
        self._clock = 0

    def _entry(self, kind: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        self._clock += 1
        entry: dict[str, Any] = {
            "parentUuid": self._parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.0.0",
            "gitBranch": "main",
            "type": kind,
            "message": message,
            "uuid": str(uuid.uuid4()),
            "timestamp": f"2025-06-01T10:{self._clock // 60:02d}:{self._clock % 60:02d}.000Z",
            **extra,
        }
        self._parent = entry["uuid"]
        self.lines.append(json.dumps(entry))
        return entry

    def user(self, text: str, **extra: Any) -> None:
        self._entry("user", {"role": "user", "content": text}, **extra)

    def user_blocks(self, blocks: list[dict[str, Any]]) -> None:
        self._entry("user", {"role": "user", "content": blocks})

    def assistant(self, *blocks: dict[str, Any]) -> None:
        self._entry(
            "assistant",
            {
                "id": f"msg_{self._clock}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": list(blocks),
                "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn",
                "usage": {"input_tokens": 100, "output_tokens": 20},
            },
            requestId=f"req_{self._clock}",
        )

    def say(self, text: str) -> None:
        self.assistant(text_block(text))

    def tool(self, name: str, tool_input: dict[str, Any], result: str | list[dict[str, Any]], is_error: bool = False):
        tool_id = f"toolu_{uuid.uuid4().hex[:20]}"
        self.assistant({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": result}
        if is_error:
            block["is_error"] = True
        self.user_blocks([block])

    def raw(self, line: str) -> None:
        self.lines.append(line)

    def write(self, path: Path) -> Path:
        path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        return path


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def sample(session_id: str, cwd: str = "/home/me/shop") -> Transcript:
    """A short realistic session: a task, a decision, a failing test, edits, a todo list."""
    t = Transcript(session_id, cwd)
    t.raw(json.dumps({"type": "summary", "summary": "Checkout refactor", "leafUuid": "x"}))
    t.user(
        "Refactor the checkout flow so that payments go through the new PaymentGateway class. "
        "Don't change the public API of cart.py, and keep Python 3.9 compatibility."
    )
    t.user("<command-name>/model</command-name>\n<command-message>model</command-message>", isMeta=True)
    t.say("I'll read the current checkout code first.")
    t.tool("Read", {"file_path": f"{cwd}/shop/checkout.py"}, "     1\tdef checkout(cart):\n     2\t    ...")
    t.assistant(
        text_block(
            "I'll use a small adapter instead of subclassing, because PaymentGateway has a different retry model."
        ),
        {
            "type": "tool_use",
            "id": "toolu_todo1",
            "name": "TodoWrite",
            "input": {
                "todos": [
                    {"content": "Add PaymentGateway adapter", "status": "completed", "activeForm": "Adding"},
                    {
                        "content": "Route checkout() through the adapter",
                        "status": "in_progress",
                        "activeForm": "Routing",
                    },
                    {"content": "Update tests for declined cards", "status": "pending", "activeForm": "Updating"},
                ]
            },
        },
    )
    t.user_blocks([{"type": "tool_result", "tool_use_id": "toolu_todo1", "content": "Todos have been modified"}])
    t.tool(
        "Edit",
        {"file_path": f"{cwd}/shop/checkout.py", "old_string": "pay(", "new_string": "gateway.charge("},
        "The file has been updated.",
    )
    t.tool("Write", {"file_path": f"{cwd}/shop/gateway_adapter.py", "content": "class Adapter: ..."}, "File created")
    t.tool(
        "Bash",
        {"command": "pytest tests/test_checkout.py -q", "description": "Run checkout tests"},
        'Traceback (most recent call last):\n  File "shop/checkout.py", line 12, in checkout\n'
        "AttributeError: 'NoneType' object has no attribute 'charge'\n1 failed, 4 passed",
        is_error=True,
    )
    t.raw('{"type": "assistant", "message": {"content": [BROKEN')
    t.user("Please make sure declined cards raise PaymentDeclined, not a generic error.")
    t.say("The root cause is that the gateway is never injected into checkout(); the fix is to pass it in.")
    return t
