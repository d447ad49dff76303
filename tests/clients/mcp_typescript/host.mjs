// An MCP host on the official TypeScript SDK: starts the command given on the command line over stdio (its
// environment passed through: AGENTCAL_API_KEY, AGENTCAL_BASE_URL), lists the tools, makes the calls in the
// JSON array of the environment's MCP_CALLS ([{"name": ..., "arguments": {...}}]) and prints one JSON
// document of what it saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";

const [command, ...args] = process.argv.slice(2);
const calls = JSON.parse(process.env.MCP_CALLS ?? "[]");
const transport = new StdioClientTransport({
  command,
  args,
  env: {
    ...getDefaultEnvironment(),
    AGENTCAL_API_KEY: process.env.AGENTCAL_API_KEY,
    AGENTCAL_BASE_URL: process.env.AGENTCAL_BASE_URL,
    ...(process.env.PYTHONPATH ? { PYTHONPATH: process.env.PYTHONPATH } : {}),
  },
  stderr: "inherit",
});
// The client tells a transport the version the server agreed to (HTTP transports send it as a header);
// stdio has no use for it, so it is only recorded here.
let negotiated = null;
transport.setProtocolVersion = (version) => {
  negotiated = version;
};

const client = new Client({ name: "agentcal-tests-typescript-host", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const results = [];
for (const call of calls) {
  results.push(await client.callTool({ name: call.name, arguments: call.arguments }));
}
await client.close();

console.log(
  JSON.stringify({
    sdkLatestProtocolVersion: LATEST_PROTOCOL_VERSION,
    negotiatedProtocolVersion: negotiated,
    server: client.getServerVersion() ?? null,
    tools,
    results,
  }),
);
