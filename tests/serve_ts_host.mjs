// A TypeScript-SDK host (plain ESM) that runs the serve scenario against `subsessions serve`
// and prints what it saw as one JSON line. Run by tests/test_serve_typescript.py from a
// directory where `npm install @github/copilot-sdk` was done.
import { CopilotClient, RuntimeConnection } from "@github/copilot-sdk";

const [python, ...serveArgs] = JSON.parse(process.argv[2]);
const seen = { ran: [], permissions: [], questions: [], hooks: [], events: [] };
const client = new CopilotClient({
  connection: RuntimeConnection.forStdio({ path: python, args: serveArgs }),
  logLevel: "warning",
});
await client.start();
const session = await client.createSession({
  onPermissionRequest: (request) => {
    seen.permissions.push({ kind: request.kind, toolName: request.toolName });
    return { kind: "approve-once" };
  },
  onUserInputRequest: (request, invocation) => {
    seen.questions.push({ question: request.question, sessionId: invocation.sessionId });
    return { answer: "blue", wasFreeform: true };
  },
  hooks: {
    onPreToolUse: (input) => { seen.hooks.push({ toolName: input.toolName, sessionId: input.sessionId }); },
  },
  tools: [
    {
      name: "lookup", description: "Look a key up",
      parameters: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
      handler: (args, invocation) => {
        seen.ran.push({ tool: "lookup", sessionId: invocation.sessionId });
        return `value of ${args.key}`;
      },
    },
    {
      name: "secret", description: "Never for agents", skipPermission: true,
      parameters: { type: "object", properties: {} },
      handler: () => { seen.ran.push({ tool: "secret" }); return "the secret"; },
    },
  ],
  customAgents: [{
    name: "checker", displayName: "Checker", description: "Checks keys",
    prompt: "You are CHECKER: look keys up and report.", tools: ["lookup"],
  }],
});
session.on((event) => {
  seen.events.push({ type: event.type, agentId: event.agentId ?? null,
                     toolName: event.data?.toolName ?? null });
});
const reply = await session.sendAndWait({ prompt: "check k1 with the checker" }, 30000);
seen.content = reply?.data?.content ?? null;
seen.sessionId = session.sessionId;
await session.disconnect();
const errors = await client.stop();
seen.stopErrors = errors.map(String);
process.stdout.write(JSON.stringify(seen) + "\n");
