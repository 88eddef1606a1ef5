// `subsessions a2a` driven by the official JavaScript SDK (@a2a-js/sdk): run by
// tests/test_a2a_js.py with the server's URL; prints what it saw as one JSON line.
// Callers: "alice" and "bob" (bearer tokens); a request without a token must be refused.
import { randomUUID } from "node:crypto";
import {
  Client, ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";
import { LegacyJsonRpcTransport } from "@a2a-js/sdk/compat/v0_3/client";

const url = process.argv[2];
const bearer = (token) => (input, init = {}) => {
  const headers = new Headers(init.headers);
  if (token) headers.set("Authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};
const clientFor = async (token) => new ClientFactory({
  ...ClientFactoryOptions.default,
  transports: [new JsonRpcTransportFactory({ fetchImpl: bearer(token) })],
}).createFromUrl(url);
const message = (text, extra = {}) => ({
  message: {
    messageId: randomUUID(), role: 1, contextId: "", taskId: "", metadata: {},
    extensions: [], referenceTaskIds: [], parts: [{ content: { $case: "text", value: text } }],
    ...extra,
  },
});
const textOf = (msg) => (msg?.parts ?? [])
  .map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const taskOf = (result) => (result.$case === "task" ? result.value : result.payload?.value ?? result);
const seen = {};

const alice = await clientFor("alice");
const bob = await clientFor("bob");
const nobody = await clientFor(null);

// send: a task completes with its answer as artifact and message
const sent = taskOf(await alice.sendMessage(message("hello")));
seen.sent = { state: sent.status.state, said: textOf(sent.status.message),
  artifact: textOf(sent.artifacts[0]), contextId: sent.contextId, taskId: sent.id };

// stream: states, each child's start and end, live usage
const stream = [];
for await (const event of alice.sendMessageStream(message("fan out"))) stream.push(event.payload);
const updates = stream.filter((p) => p.$case === "statusUpdate").map((p) => p.value);
seen.stream = {
  first: stream[0].$case,
  states: updates.map((u) => u.status.state),
  children: updates.map((u) => textOf(u.status.message)).filter((t) => t.startsWith("subagent.")),
  usage: updates.filter((u) => u.metadata?.usage).map((u) => u.metadata.usage.total_tokens),
  said: textOf(updates.at(-1).status.message),
};

// follow-up on the same context
const again = taskOf(await alice.sendMessage(message("again", { contextId: sent.contextId })));
seen.followUp = { contextId: again.contextId, said: textOf(again.status.message) };

// input-required: the session's question; the next message on the task answers it
const asked = taskOf(await alice.sendMessage(message("ask")));
const answered = taskOf(await alice.sendMessage(message("blue", { taskId: asked.id, contextId: asked.contextId })));
seen.ask = { state: asked.status.state, question: textOf(asked.status.message),
  answered: answered.status.state, said: textOf(answered.status.message) };

// cancel mid-stream: the child is held, the task and its tree end canceled
const held = [];
for await (const event of alice.sendMessageStream(message("fan out held"))) {
  held.push(event.payload);
  const update = event.payload.$case === "statusUpdate" ? event.payload.value : null;
  if (update && textOf(update.status.message).startsWith("subagent.started")) {
    const cancelled = await alice.cancelTask({ id: update.taskId, tenant: "", metadata: {} });
    seen.cancelled = { state: cancelled.status.state, taskId: update.taskId,
      contextId: update.contextId, child: textOf(update.status.message).split(" ").at(-1) };
  }
}
seen.cancelled.streamEnd = held.at(-1).value.status?.state;

// another caller's task and context are not found; no token is refused
const refusal = async (call) => { try { await call(); return "allowed"; } catch (e) { return String(e.message ?? e); } };
seen.bob = {
  get: await refusal(() => bob.getTask({ id: sent.id, tenant: "" })),
  cancel: await refusal(() => bob.cancelTask({ id: sent.id, tenant: "", metadata: {} })),
  send: await refusal(() => bob.sendMessage(message("mine", { contextId: sent.contextId }))),
  listed: (await bob.listTasks({ tenant: "", contextId: "", status: 0, pageToken: "" })).tasks.length,
};
seen.nobody = await refusal(() => nobody.sendMessage(message("hello")));

// the SDK's v0.3 compatibility: the same server through the legacy JSON-RPC names
const card = await (await fetch(new URL(".well-known/agent-card.json", url))).json();
const legacy = new Client(new LegacyJsonRpcTransport({ endpoint: url, fetchImpl: bearer("alice") }), card);
const old = taskOf(await legacy.sendMessage(message("legacy hello")));
seen.legacy = { state: old.status.state, said: textOf(old.status.message) };

console.log(JSON.stringify(seen));
