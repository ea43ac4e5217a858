// A 2026-07-28 client of the official TypeScript SDK v2
// (@modelcontextprotocol/client), pinned to that era, run against a gateway
// over streamable HTTP:
//
//   NODE_PATH=<repo>/.cache/npm/node_modules node typescript-client-mrtr.cjs <url> <bearer token> <call.json>
//
// call.json is {"tool", "arguments", "answer"}. The client declares
// elicitation and answers every elicitation/create it is given with
// {"action": "accept", "content": answer}; the SDK fulfils input_required
// results with that handler and retries on its own. The script prints one
// JSON document: {"era": the negotiated protocol version, "asked": the
// messages it was asked, "result": the tools/call result} or {"error":
// {"code", "message"}}. The Go test that runs it asserts on that output, so
// the script decides nothing itself.
"use strict";

const fs = require("fs");
const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");

async function main() {
  const [url, token, callFile] = process.argv.slice(2);
  const { tool, arguments: args, answer } = JSON.parse(fs.readFileSync(callFile, "utf8"));
  const client = new Client(
    { name: "typescript-client-mrtr", version: "1.0.0" },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  const asked = [];
  client.setRequestHandler("elicitation/create", async (request) => {
    asked.push(request.params.message);
    return { action: "accept", content: answer };
  });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
  );
  const out = { era: client.getNegotiatedProtocolVersion?.() ?? null, asked };
  try {
    out.result = await client.callTool({ name: tool, arguments: args });
  } catch (err) {
    out.error = { code: err.code ?? null, message: String(err.message) };
  }
  await client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
