"""Drive the MCP server the way Claude Code or Claude Desktop does: start it over stdio with
the official SDK's client, record a run, recall it for a new task, grade it. No API key.

python examples/mcp_client.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters


async def main() -> None:
    store = Path(tempfile.mkdtemp()) / "episodes.json"
    # What a client's config names: the command and its arguments (here through this Python).
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepcrew_episodic", "mcp", "--store", str(store)],
    )
    async with Client(server) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        print("tools:", ", ".join(tools))

        # After a task: record it, with the lesson a later run should know.
        recorded = await client.call_tool(
            "record",
            {
                "task": "Deploy the search service",
                "answer": "Ran the migration, then deployed; the health checks pass.",
                "outcome": "success",  # your own belief: stored as claimed_success
                "verified": False,
                "lesson": "Run the migration before the deploy, off-peak.",
                "tags": ["deploy"],
                "tools": ["kubectl"],
            },
        )
        episode_id = recorded.structured_content["id"]  # type: ignore[index]
        print("recorded:", episode_id, recorded.structured_content["outcome"])  # type: ignore[index]

        # Before the next task: recall, and read the block as the model would.
        recalled = await client.call_tool("recall", {"task": "deploy the search service again"})
        data = recalled.structured_content or {}
        print(data["block"])
        print("items:", json.dumps([(i["id"], i["outcome"]) for i in data["items"]]))

        # Later the user confirms that the deploy worked: the claim becomes a verified success.
        graded = await client.call_tool(
            "grade",
            {"id": episode_id, "outcome": "success", "verified": True, "note": "user: it worked"},
        )
        print("graded:", graded.structured_content["now_reads"])  # type: ignore[index]


if __name__ == "__main__":
    anyio.run(main)
