#!/usr/bin/env python3
"""crashing_mcp.py - an MCP server (stdio, JSON-RPC lines) whose one tool, "explode", makes the
process exit in the middle of the call: the server tests' crashing MCP server."""
import json
import sys

TOOL = {"name": "explode", "description": "Explode the process in the middle of a call",
        "inputSchema": {"type": "object", "properties": {"reason": {"type": "string"}},
                        "required": ["reason"]}}

for line in sys.stdin:
    msg = json.loads(line)
    i, method = msg.get("id"), msg.get("method")
    if i is None:
        continue  # a notification
    if method == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "crashing", "version": "1"}}
    elif method == "tools/list":
        r = {"tools": [TOOL]}
    elif method == "tools/call":
        sys.exit(3)
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": i,
                          "error": {"code": -32601, "message": "no such method"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": i, "result": r}), flush=True)
