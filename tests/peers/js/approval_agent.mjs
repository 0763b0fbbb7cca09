// A real A2A 1.0 agent on the official JavaScript SDK (@a2a-js/sdk), for end-to-end tests.
//
// Run: node tests/peers/js/approval_agent.mjs --port N [--push-latency-ms 700] [--hold]
//
// It serves its card at /.well-known/agent-card.json and JSON-RPC at /a2a/jsonrpc on
// 127.0.0.1, and pushes every task event to the push config given with SendMessage (the
// SDK's own sender: `Authorization: <scheme> <credentials>` from the config's authentication).
//
// First turn: the task (SUBMITTED), WORKING, then AUTH_REQUIRED asking for an interactions/v1
// approval. Every follow-up first republishes the task as it stands, as the SDK's executor
// contract requires ("every call MUST publish either a task or a message event as its first
// event, including follow-up turns"): the same AUTH_REQUIRED status, timestamp, message and
// metadata. Then WORKING, and COMPLETED for `approved: true`, REJECTED for `approved: false`,
// AUTH_REQUIRED again (a new status) for anything else: text never approves.
//
// Pushes leave --push-latency-ms after the event (default 700), so the republished
// AUTH_REQUIRED lands after the caller has recorded the answer it sent. With --hold, a
// follow-up waits after its republish until POST /test/release (or 60 s), so a test can look
// at the caller while the republish is the latest news.
//
// For tests: GET /test/received lists every follow-up message (its messageId, taskId, text
// and interactions/v1 answer); GET /test/pushes lists every push with its idempotency key as
// a receiver derives it (sha256 of the body), its kind, task, state and HTTP status once
// answered.

import { createHash, randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import { AGENT_CARD_PATH, Role, TaskState } from "@a2a-js/sdk";
import {
  AgentEvent,
  DefaultPushNotificationSender,
  DefaultRequestHandler,
  InMemoryPushNotificationStore,
  InMemoryTaskStore,
} from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, UserBuilder } from "@a2a-js/sdk/server/express";
import express from "express";

const INTERACTIONS = "https://docs.nylorun.com/a2a/interactions/v1";
const RPC_PATH = "/a2a/jsonrpc";
const PROMPT = "Publish the release notes to the public site?";
const HOLD_LIMIT_MS = 60_000;

const { values: options } = parseArgs({
  options: {
    port: { type: "string", default: process.env.PORT ?? "" },
    "push-latency-ms": { type: "string", default: "700" },
    hold: { type: "boolean", default: false },
  },
});
const port = Number(options.port);
if (!Number.isInteger(port) || port <= 0) {
  console.error("usage: approval_agent.mjs --port N [--push-latency-ms MS] [--hold]");
  process.exit(2);
}
const pushLatencyMs = Number(options["push-latency-ms"]);

const received = [];
const pushes = [];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Held follow-ups, released together by POST /test/release.
let release;
let released = new Promise((resolve) => (release = resolve));

const interactionId = (taskId) => `approve-publish-${taskId}`;
const textPart = (text) => ({
  content: { $case: "text", value: text },
  metadata: undefined,
  filename: "",
  mediaType: "",
});

function agentMessage(context, text, metadata) {
  return {
    messageId: randomUUID(),
    contextId: context.contextId,
    taskId: context.taskId,
    role: Role.ROLE_AGENT,
    parts: [textPart(text)],
    metadata,
    extensions: metadata ? [INTERACTIONS] : [],
    referenceTaskIds: [],
  };
}

function statusUpdate(context, state, text, metadata) {
  return AgentEvent.statusUpdate({
    taskId: context.taskId,
    contextId: context.contextId,
    status: {
      state,
      message: agentMessage(context, text, metadata),
      timestamp: new Date().toISOString(),
    },
    metadata: undefined,
  });
}

function ask(context, text) {
  const question = {
    interactionId: interactionId(context.taskId),
    kind: "approval",
    prompt: PROMPT,
  };
  const metadata = { [INTERACTIONS]: question };
  return statusUpdate(context, TaskState.TASK_STATE_AUTH_REQUIRED, text, metadata);
}

function textOf(message) {
  return message.parts
    .filter((part) => part.content?.$case === "text")
    .map((part) => part.content.value)
    .join("");
}

class ApprovalExecutor {
  contexts = new Map(); // taskId → contextId, for cancelTask (which is given only the task id)

  async execute(context, bus) {
    this.contexts.set(context.taskId, context.contextId);
    // Echoed in the response's A2A-Extensions header: the client asked for it, we speak it.
    if (context.context.requestedExtensions?.includes(INTERACTIONS)) {
      context.context.addActivatedExtension(INTERACTIONS);
    }
    if (context.task === undefined) {
      bus.publish(
        AgentEvent.task({
          id: context.taskId,
          contextId: context.contextId,
          status: {
            state: TaskState.TASK_STATE_SUBMITTED,
            message: undefined,
            timestamp: new Date().toISOString(),
          },
          artifacts: [],
          history: [context.userMessage],
          metadata: undefined,
        }),
      );
      bus.publish(statusUpdate(context, TaskState.TASK_STATE_WORKING, "Drafting the notes"));
      bus.publish(ask(context, PROMPT));
      return;
    }
    const message = context.userMessage;
    const answer = message.metadata?.[INTERACTIONS];
    received.push({
      messageId: message.messageId,
      taskId: context.taskId,
      text: textOf(message),
      answer: answer ?? null,
    });

    // The task as it stands, unchanged: the contract's first event of every call.
    bus.publish(AgentEvent.task(context.task));
    if (options.hold) {
      await Promise.race([released, sleep(HOLD_LIMIT_MS)]);
    }
    const ours = answer?.interactionId === interactionId(context.taskId);
    const approved = ours ? answer.approved : undefined;
    bus.publish(statusUpdate(context, TaskState.TASK_STATE_WORKING, "Working on it"));
    if (approved === true) {
      bus.publish(statusUpdate(context, TaskState.TASK_STATE_COMPLETED, "Published the notes"));
    } else if (approved === false) {
      const text = "Not published: the approval was denied";
      bus.publish(statusUpdate(context, TaskState.TASK_STATE_REJECTED, text));
    } else {
      bus.publish(ask(context, `A text reply is not an approval. ${PROMPT}`));
    }
  }

  async cancelTask(taskId, bus) {
    const context = { taskId, contextId: this.contexts.get(taskId) ?? "" };
    bus.publish(statusUpdate(context, TaskState.TASK_STATE_CANCELED, "Cancelled"));
  }
}

// The SDK's own sender, each push started `pushLatencyMs` after its event (a slow network or
// a queue in front of the webhook); order is kept, as timers of one delay fire in order.
class LatePushSender {
  constructor(sender, latencyMs) {
    this.sender = sender;
    this.latencyMs = latencyMs;
  }

  async send(streamResponse, context, task) {
    await sleep(this.latencyMs);
    return this.sender.send(streamResponse, context, task);
  }
}

// Only the push sender fetches in this process: record what it POSTs and how it is answered.
const sdkFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const body = JSON.parse(init.body);
  const [kind] = Object.keys(body);
  const record = {
    key: `sha256:${createHash("sha256").update(init.body).digest("hex")}`,
    kind,
    taskId: body[kind].taskId ?? body[kind].id,
    state: body[kind].status?.state ?? null,
    url: String(url),
    status: null,
  };
  pushes.push(record);
  const response = await sdkFetch(url, init);
  record.status = response.status;
  return response;
};

const card = {
  name: "Approval peer (JS SDK)",
  description: "Drafts release notes and asks for approval before publishing them.",
  version: "1.0.0",
  supportedInterfaces: [
    {
      url: `http://127.0.0.1:${port}${RPC_PATH}`,
      protocolBinding: "JSONRPC",
      protocolVersion: "1.0",
      tenant: "",
    },
  ],
  capabilities: {
    streaming: false,
    pushNotifications: true,
    extensions: [
      { uri: INTERACTIONS, description: "Asks for approvals", required: false, params: undefined },
    ],
  },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ["text/plain"],
  defaultOutputModes: ["text/plain"],
  skills: [
    {
      id: "publish-notes",
      name: "Publish release notes",
      description: "Drafts release notes and publishes them once approved.",
      tags: ["test"],
      examples: [],
      inputModes: [],
      outputModes: [],
      securityRequirements: [],
    },
  ],
  signatures: [],
  provider: undefined,
};

const pushStore = new InMemoryPushNotificationStore();
const handler = new DefaultRequestHandler(
  card,
  new InMemoryTaskStore(),
  new ApprovalExecutor(),
  undefined,
  pushStore,
  new LatePushSender(new DefaultPushNotificationSender(pushStore), pushLatencyMs),
);

const app = express();
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
app.use(
  RPC_PATH,
  jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }),
);
app.get("/test/received", (req, res) => res.json(received));
app.get("/test/pushes", (req, res) => res.json(pushes));
app.post("/test/release", (req, res) => {
  release();
  released = new Promise((resolve) => (release = resolve));
  res.json({ released: true });
});
app.listen(port, "127.0.0.1");
process.on("SIGTERM", () => process.exit(0));
