// The TypeScript client against the real server. The pytest test tests/clients/test_typescript_client.py
// starts the server, makes the agents and runs these with their keys in the environment.
import assert from "node:assert/strict";
import { once } from "node:events";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";

import {
  AgentCal,
  AgentCalError,
  AgentPaused,
  ApprovalWaitTimeout,
  type Calendar,
  type ClientOptions,
  HoldAwaitingApproval,
  HoldEvicted,
  NotFound,
  PreconditionFailed,
  RateLimited,
  SlotConflict,
  errorFromResponse,
  webhooks,
} from "agentcal";

function env(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} is not set (tests/clients/test_typescript_client.py sets it)`);
  return value;
}

const BASE_URL = env("AGENTCAL_BASE_URL");

function client(keyVariable = "AGENTCAL_API_KEY", options: ClientOptions = {}): AgentCal {
  return new AgentCal({ apiKey: env(keyVariable), baseUrl: BASE_URL, ...options });
}

let nextHour = 0;

/** A span of `minutes` on its own hour, days ahead, so no two tests meet on a calendar. */
function span(minutes = 30): [Date, Date] {
  const start = new Date();
  start.setUTCMinutes(0, 0, 0);
  start.setUTCHours(start.getUTCHours() + 48 + 3 * nextHour++);
  return [start, new Date(start.getTime() + minutes * 60_000)];
}

async function newCalendar(agent: AgentCal, name: string): Promise<Calendar> {
  return agent.calendars.create({ name });
}

async function rejection<E extends Error>(promise: Promise<unknown>, kind: abstract new (...args: never[]) => E): Promise<E> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof kind, `expected ${kind.name}, got ${String(error)}`);
    return error;
  }
  assert.fail(`expected ${kind.name}, but the call succeeded`);
}

const seconds = (since: number): number => (performance.now() - since) / 1000;

// --- The agent loop --------------------------------------------------------------------------------------

describe("the booking loop", () => {
  test("find a slot, hold it against the calendar's ETag, commit, cancel", async () => {
    const agent = client();
    const me = await agent.me();
    assert.equal(me.agent.id, env("AGENTCAL_AGENT_ID"));
    assert.equal(me.paused, null);
    assert.ok(agent.rateLimit !== undefined && agent.rateLimit.limit >= 1, "the budget is read from every answer");

    const calendar = await newCalendar(agent, "Loop calendar");
    const [from, to] = span(8 * 60);
    const slot = await agent.findFreeSlot([calendar.id], 30, from, to);
    assert.ok(slot !== undefined, "an empty calendar has a free slot");
    assert.equal(Date.parse(slot.start_time), from.getTime());

    const availability = await agent.calendars.availability(calendar.id, from, to);
    assert.equal(availability.etag, `"${availability.version}"`);
    const session = await agent.hold(calendar.id, slot.start_time, slot.end_time, {
      ifMatch: availability.etag,
      ttlSeconds: 30,
      title: "Intro call",
    });
    try {
      assert.equal(session.hold.status, "held");
      const booking = await session.commit();
      assert.equal(booking.status, "committed");
      assert.equal(booking.hold_id, session.id);
      assert.equal((await agent.bookings.get(booking.id)).title, "Intro call");

      const listed = [];
      for await (const found of agent.bookings.list(calendar.id, { start: from, end: to })) listed.push(found.id);
      assert.deepEqual(listed, [booking.id]);

      const cancelled = await agent.bookings.cancel(booking.id);
      assert.equal(cancelled.status, "cancelled");
    } finally {
      await session.close(); // committed: nothing to release
    }
    const calendars = [];
    for await (const listed of agent.calendars.list()) calendars.push(listed.id);
    assert.ok(calendars.includes(calendar.id));
  });

  test("a second agent's 409 carries typed alternatives, and one of them can be held", async () => {
    const agent = client();
    const rival = client("AGENTCAL_RIVAL_KEY");
    const calendar = await newCalendar(agent, "Contested calendar");
    const [start, end] = span();
    const first = await agent.holds.create(calendar.id, start, end, { ttlSeconds: 60 });

    const conflict = await rejection(rival.holds.create(calendar.id, start, end), SlotConflict);
    assert.equal(conflict.status, 409);
    assert.equal(conflict.code, "slot_conflict");
    assert.equal(conflict.attempts, 1, "a conflict is never retried");
    assert.equal(conflict.heldByPriority, 100);
    assert.equal(conflict.callerPriority, 100);
    assert.equal(conflict.conflicting["calendar"], calendar.id);
    assert.ok(conflict.requestId);
    assert.ok(conflict.alternatives.length > 0, "free spans of the same length are offered");
    const alternative = conflict.alternatives[0];
    assert.ok(alternative !== undefined);
    assert.equal(Date.parse(alternative.end_time) - Date.parse(alternative.start_time), 30 * 60_000);

    const second = await rival.holds.create(calendar.id, alternative.start_time, alternative.end_time);
    assert.equal(second.status, "held");
    await rival.holds.release(second.id, second.hold_token ?? "");
    await agent.holds.release(first.id, first.hold_token ?? "");
  });

  test("a hold against a stale If-Match is refused with 412", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Changing calendar");
    const [from, to] = span(4 * 60);
    const before = await agent.calendars.availability(calendar.id, from, to);
    await agent.bookings.commit(calendar.id, from, new Date(from.getTime() + 30 * 60_000));

    const stale = await rejection(
      agent.holds.create(calendar.id, new Date(from.getTime() + 60 * 60_000), new Date(from.getTime() + 90 * 60_000), {
        ifMatch: before.version,
      }),
      PreconditionFailed,
    );
    assert.equal(stale.status, 412);
    assert.equal(stale.attempts, 1);

    const now = await agent.calendars.availability(calendar.id, from, to);
    assert.ok(now.version > before.version);
    const held = await agent.holds.create(
      calendar.id,
      new Date(from.getTime() + 60 * 60_000),
      new Date(from.getTime() + 90 * 60_000),
      { ifMatch: now.version },
    );
    assert.equal(held.status, "held");
  });

  test("a hold session heartbeats past its TTL, then commits", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Slow thinker");
    const [start, end] = span();
    const result = await agent.withHold(calendar.id, start, end, { ttlSeconds: 2 }, async (session) => {
      const firstExpiry = Date.parse(session.hold.expires_at ?? "");
      await new Promise((resolve) => setTimeout(resolve, 3_500)); // longer than the TTL: only heartbeats keep it
      session.check(); // the heartbeat met no trouble
      const seen = await agent.holds.get(session.id);
      assert.equal(seen.status, "held");
      assert.ok(Date.parse(seen.expires_at ?? "") > firstExpiry, "the heartbeat moved the expiry");
      return session.commit();
    });
    assert.equal(result.status, "committed");
  });

  test("a session that ends uncommitted releases its hold", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Undecided");
    const [start, end] = span();
    let holdId = "";
    await assert.rejects(
      agent.withHold(calendar.id, start, end, { ttlSeconds: 30 }, async (session) => {
        holdId = session.id;
        throw new Error("the agent changed its mind");
      }),
      /changed its mind/,
    );
    assert.equal((await agent.holds.get(holdId)).status, "released");
  });

  test("a session whose hold was taken over says so on commit", async () => {
    const agent = client();
    const boss = client("AGENTCAL_BOSS_KEY");
    const calendar = await newCalendar(agent, "Outranked");
    const [start, end] = span();
    const session = await agent.hold(calendar.id, start, end, { ttlSeconds: 30 });
    await boss.bookings.commit(calendar.id, start, end);
    const lost = await rejection(session.commit(), HoldEvicted);
    assert.equal(lost.status, 409);
    await session.close(); // already reported: nothing more to say
  });

  test("an approval gates a hold until a person decides; cancelling it releases the hold", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Needs sign-off");
    const session = await agent.hold(calendar.id, ...span(), { ttlSeconds: 30 });
    const approval = await agent.approvals.request("Book the board review", { why: "the CEO asked" }, {
      holdId: session.id,
      state: { step: 3 },
    });
    assert.equal(approval.status, "pending");
    const waited = rejection(agent.approvals.wait(approval.id, { timeout: 0.2, pollInterval: 0.05 }), ApprovalWaitTimeout);
    assert.equal((await waited).approval.id, approval.id);
    await rejection(session.commit(), HoldAwaitingApproval);
    await session.close(); // the approval decides the hold's fate: nothing released here

    const cancelled = await agent.approvals.cancel(approval.id);
    assert.equal(cancelled.status, "cancelled");
    assert.equal((await agent.holds.get(session.id)).status, "released");
    const pending = [];
    for await (const listed of agent.approvals.list({ status: "pending" })) pending.push(listed.id);
    assert.ok(!pending.includes(approval.id));
    const events = [];
    for await (const event of agent.events.list({ limit: 5 })) events.push(event.type);
    assert.ok(events.every((type) => typeof type === "string"));
  });

  test("an unknown id is NotFound", async () => {
    const missing = await rejection(client().holds.get("hld_doesnotexist"), NotFound);
    assert.equal(missing.status, 404);
  });
});

// --- Retries -----------------------------------------------------------------------------------------------

interface Seen {
  method: string;
  idempotencyKey: string | undefined;
  upstreamStatus: number | undefined;
  replayed: string | null;
}

type Plan = (index: number, request: IncomingMessage) => "forward" | "lose" | { status: number; headers: Record<string, string> };

/** A proxy in front of the server that loses answers or answers for it, per the plan. */
async function faultyProxy(plan: Plan): Promise<{ url: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const key = request.headers["idempotency-key"];
      const record: Seen = {
        method: request.method ?? "",
        idempotencyKey: typeof key === "string" ? key : undefined,
        upstreamStatus: undefined,
        replayed: null,
      };
      const action = plan(seen.length, request);
      seen.push(record);
      if (typeof action === "object") {
        response.writeHead(action.status, { "Content-Type": "application/problem+json", ...action.headers });
        response.end(JSON.stringify({ status: action.status, error: "service_unavailable", detail: "try later" }));
        return;
      }
      const headers = new Headers();
      for (const [name, value] of Object.entries(request.headers)) {
        if (typeof value === "string" && !["host", "content-length", "connection"].includes(name)) headers.set(name, value);
      }
      const upstream = await fetch(BASE_URL + (request.url ?? "/"), {
        method: request.method ?? "GET",
        headers,
        body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
      });
      const body = Buffer.from(await upstream.arrayBuffer());
      record.upstreamStatus = upstream.status;
      record.replayed = upstream.headers.get("Idempotent-Replayed");
      if (action === "lose") {
        request.socket.destroy(); // the server did the work; the client never hears
        return;
      }
      const passed = [...upstream.headers].filter(([name]) => !["content-length", "content-encoding", "transfer-encoding", "connection"].includes(name));
      response.writeHead(upstream.status, Object.fromEntries(passed));
      response.end(body);
    })();
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe("retries", () => {
  const proxies: { close: () => Promise<void> }[] = [];
  after(async () => {
    await Promise.all(proxies.map((proxy) => proxy.close()));
  });

  test("a lost answer is retried with the same Idempotency-Key and the server replays the first", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Flaky network");
    const proxy = await faultyProxy((index) => (index === 0 ? "lose" : "forward"));
    proxies.push(proxy);
    const behindProxy = client("AGENTCAL_API_KEY", { baseUrl: proxy.url });
    const [start, end] = span();

    const hold = await behindProxy.holds.create(calendar.id, start, end);

    assert.equal(proxy.seen.length, 2);
    const [lost, retried] = proxy.seen;
    assert.ok(lost !== undefined && retried !== undefined);
    assert.ok(lost.idempotencyKey?.startsWith("agentcal-ts-"));
    assert.equal(retried.idempotencyKey, lost.idempotencyKey, "one key per logical call, on every retry");
    assert.equal(lost.upstreamStatus, 201);
    assert.equal(retried.replayed, "true", "the retry got the first answer again");
    assert.equal((await agent.holds.get(hold.id)).status, "held");
    const created = [];
    for await (const record of agent.audit.list({ eventType: "calendar.hold.created", calendar: calendar.id })) created.push(record);
    assert.equal(created.length, 1, "the hold was made once");
  });

  test("the same key sent twice gets the first answer", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Replays");
    const [start, end] = span();
    const key = `test-${globalThis.crypto.randomUUID()}`;
    const first = await agent.holds.create(calendar.id, start, end, { idempotencyKey: key });
    const again = await agent.holds.create(calendar.id, start, end, { idempotencyKey: key });
    assert.equal(again.id, first.id);
    assert.equal(again.hold_token, first.hold_token);
  });

  test("a 503 is retried after its Retry-After, with the same key", async () => {
    const agent = client();
    const calendar = await newCalendar(agent, "Busy server");
    const proxy = await faultyProxy((index) => (index === 0 ? { status: 503, headers: { "Retry-After": "1" } } : "forward"));
    proxies.push(proxy);
    const [start, end] = span();
    const started = performance.now();
    const hold = await client("AGENTCAL_API_KEY", { baseUrl: proxy.url }).holds.create(calendar.id, start, end);
    assert.ok(seconds(started) >= 0.95, "Retry-After was honoured");
    assert.equal(hold.status, "held");
    assert.equal(proxy.seen[1]?.idempotencyKey, proxy.seen[0]?.idempotencyKey);
  });

  test("429s are retried after Retry-After until the budget gives requests back", async () => {
    // This agent's bucket holds one request and gives one back every half second.
    const impatient = client("AGENTCAL_THROTTLED_KEY", { maxRetries: 0 });
    const refusals = (await Promise.allSettled([1, 2, 3].map(() => impatient.me()))).flatMap((outcome) =>
      outcome.status === "rejected" ? [outcome.reason as unknown] : [],
    );
    assert.ok(refusals.length > 0, "three requests at once exceed a bucket of one");
    for (const refusal of refusals) {
      assert.ok(refusal instanceof RateLimited, String(refusal));
      assert.equal(refusal.status, 429);
      assert.ok(refusal.retryAfter !== undefined && refusal.retryAfter > 0, "the 429 says when to come back");
      assert.ok(refusal.retryable);
    }
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // the bucket fills again

    const patient = client("AGENTCAL_THROTTLED_KEY");
    const started = performance.now();
    const answers = await Promise.all([1, 2, 3].map(() => patient.me()));
    assert.equal(answers.length, 3);
    assert.ok(seconds(started) >= 0.9, "the refused calls waited for Retry-After before succeeding");
  });

  test("a paused agent gets AgentPaused at once, never retried, and still reads", async () => {
    const paused = client("AGENTCAL_PAUSED_KEY");
    const calendar = env("AGENTCAL_PAUSED_CALENDAR");
    const [start, end] = span();
    const started = performance.now();
    const refused = await rejection(paused.holds.create(calendar, start, end), AgentPaused);
    assert.equal(refused.status, 423);
    assert.equal(refused.paused, "agent");
    assert.ok(refused.pausedAt);
    assert.equal(refused.attempts, 1);
    assert.equal(refused.retryable, false);
    assert.ok(seconds(started) < 1);
    const me = await paused.me();
    assert.equal(me.paused?.scope, "agent");
  });
});

// --- Errors from problems -------------------------------------------------------------------------------

describe("problem documents", () => {
  test("the code picks the class, within its status's family", () => {
    assert.ok(errorFromResponse(409, { error: "slot_conflict", detail: "taken" }) instanceof SlotConflict);
    assert.ok(errorFromResponse(423, {}) instanceof AgentPaused, "423 is only ever a pause");
    const misnamed = errorFromResponse(400, { error: "agent_paused" });
    assert.equal(misnamed.constructor.name, "InvalidRequest");
    const html = errorFromResponse(502, undefined, { text: "<html>Bad gateway</html>" });
    assert.ok(html instanceof AgentCalError && html.retryable);
    assert.equal(html.code, "http_502");
    const quota = errorFromResponse(429, { error: "quota_exceeded", quota: "live_holds" });
    assert.equal(quota.retryable, false, "a quota is the agent's decision, not a retry");
  });
});

// --- Webhooks --------------------------------------------------------------------------------------------

describe("webhooks", () => {
  test("a real delivery verifies; a tampered, foreign or stale one does not", async () => {
    const deliveries: { headers: IncomingMessage["headers"]; body: Buffer }[] = [];
    const receiver = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        deliveries.push({ headers: request.headers, body: Buffer.concat(chunks) });
        response.writeHead(200).end("ok");
      });
    });
    receiver.listen(0, "127.0.0.1");
    await once(receiver, "listening");
    try {
      const { port } = receiver.address() as AddressInfo;
      const created = await fetch(`${BASE_URL}/v1/webhook-endpoints`, {
        method: "POST",
        headers: { Authorization: `Bearer ${env("AGENTCAL_API_KEY")}`, "Content-Type": "application/json" },
        body: JSON.stringify({ url: `http://127.0.0.1:${port}/hooks`, events: ["hold.created"] }),
      });
      assert.equal(created.status, 201, await created.clone().text());
      const { secret } = (await created.json()) as { secret: string };
      assert.ok(secret.startsWith("whsec_"));

      const agent = client();
      const calendar = await newCalendar(agent, "Announced");
      const hold = await agent.holds.create(calendar.id, ...span());
      const deadline = performance.now() + 20_000;
      while (deliveries.length === 0 && performance.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const delivery = deliveries[0];
      assert.ok(delivery !== undefined, "the server delivered hold.created");

      const event = await webhooks.verify(delivery.body, delivery.headers, secret);
      if (event.type !== "hold.created") assert.fail(`expected hold.created, got ${event.type}`);
      const announced: unknown = event.data["hold"];
      assert.ok(typeof announced === "object" && announced !== null && "id" in announced);
      assert.equal(announced.id, hold.id);
      // The same with a Fetch Headers and the body as text.
      const asFetch = new Headers();
      for (const [name, value] of Object.entries(delivery.headers)) if (typeof value === "string") asFetch.set(name, value);
      assert.equal((await webhooks.verify(delivery.body.toString("utf8"), asFetch, secret)).id, event.id);

      const tampered = delivery.body.toString("utf8").replace(hold.id, "hld_someoneelse");
      await assert.rejects(webhooks.verify(tampered, delivery.headers, secret), webhooks.WebhookVerificationError);
      await assert.rejects(
        webhooks.verify(delivery.body, delivery.headers, `whsec_${"A".repeat(32)}`),
        webhooks.WebhookVerificationError,
      );
      const stale = { ...delivery.headers, "webhook-timestamp": String(Math.floor(Date.now() / 1000) - 3600) };
      await assert.rejects(webhooks.verify(delivery.body, stale, secret), /outside the tolerance/);
      const unsigned = { ...delivery.headers, "webhook-signature": undefined };
      await assert.rejects(webhooks.verify(delivery.body, unsigned, secret), /missing/);
    } finally {
      receiver.close();
    }
  });

  test("headers signed by the server's own signing function verify", async () => {
    const signed = JSON.parse(env("AGENTCAL_SIGNED_DELIVERY")) as {
      secret: string;
      body: string;
      headers: Record<string, string>;
    };
    const event = await webhooks.verify(signed.body, signed.headers, signed.secret);
    assert.equal(event.type, "booking.committed");
    // A rotation sends several signatures: any one that matches is enough.
    const rotated = { ...signed.headers, "webhook-signature": `v1,bm90IGl0 ${signed.headers["webhook-signature"]}` };
    assert.equal((await webhooks.verify(signed.body, rotated, signed.secret)).id, event.id);
  });
});
