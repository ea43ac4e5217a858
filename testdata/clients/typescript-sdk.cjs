// A client of the official TypeScript SDK (@modelcontextprotocol/sdk) run
// against a gateway over streamable HTTP:
//
//   NODE_PATH=<repo>/.cache/npm/node_modules node typescript-sdk.cjs <url> <steps.json>
//
// steps.json is an array of {"method", "params"}; each is sent with the SDK's
// own call for that method, and the script prints one JSON document:
// {"server": initialize's serverInfo, "results": [{"result"} or {"error":
// {"code", "message"}} per step]}. The Go test that runs it asserts on that
// output, so the script decides nothing itself.
"use strict";

const fs = require("fs");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  const [url, stepsFile] = process.argv.slice(2);
  const steps = JSON.parse(fs.readFileSync(stepsFile, "utf8"));
  const client = new Client({ name: "typescript-sdk-e2e", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const calls = {
    "tools/list": (p) => client.listTools(p),
    "tools/call": (p) => client.callTool(p),
    "resources/list": (p) => client.listResources(p),
    "resources/read": (p) => client.readResource(p),
    "prompts/list": (p) => client.listPrompts(p),
    "prompts/get": (p) => client.getPrompt(p),
  };
  const results = [];
  for (const { method, params } of steps) {
    const call = calls[method];
    if (!call) throw new Error(`no SDK call for ${method}`);
    try {
      results.push({ result: await call(params) });
    } catch (err) {
      results.push({ error: { code: err.code ?? null, message: String(err.message) } });
    }
  }
  const server = client.getServerVersion();
  await client.close();
  process.stdout.write(JSON.stringify({ server, results }) + "\n");
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
