// An agent written against the SDK @hey-api/openapi-ts generates (its bundled fetch client): two agents
// race for one slot, the loser takes the first alternative the 409 offers, commits it and cancels the
// booking. Each step is printed as a JSON line.
import { randomUUID } from "node:crypto";

import { createClient, createConfig } from "./generated/hey-api/client/index.js";
import {
  cancelBooking,
  getAvailability,
  commitBooking,
  createHold,
  listCalendars,
} from "./generated/hey-api/sdk.gen.js";

function setting(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

function report(step: string, facts: Record<string, unknown>): void {
  console.log(JSON.stringify({ step, ...facts }));
}

const baseUrl = setting("AGENTCAL_BASE_URL");
const calendarId = setting("AGENTCAL_CALENDAR_ID");
const planner = createClient(createConfig({ baseUrl, auth: setting("AGENTCAL_KEY") }));
const rival = createClient(createConfig({ baseUrl, auth: setting("AGENTCAL_SECOND_KEY") }));
const onCalendar = { calendar_id: calendarId };

const listed = await listCalendars({ client: planner });
if (!listed.data) throw new Error(`listing calendars answered ${listed.response.status}`);
report("calendars", { ids: listed.data.results.map((calendar) => calendar.id) });

const tomorrow = new Date(Date.now() + 24 * 3600 * 1000);
tomorrow.setUTCMinutes(0, 0, 0);
const availability = await getAvailability({
  client: planner,
  path: onCalendar,
  query: {
    start: tomorrow.toISOString(),
    end: new Date(tomorrow.getTime() + 8 * 3600 * 1000).toISOString(),
    duration_minutes: 30,
  },
});
const etag = availability.response.headers.get("ETag");
const free = availability.data?.free_slots[0];
if (!etag || !free) throw new Error(`availability answered ${availability.response.status} without a free slot`);
report("availability", { etag, free });
const span = {
  start_time: free.start_time,
  end_time: new Date(Date.parse(free.start_time) + 30 * 60 * 1000).toISOString(),
};

const held = await createHold({
  client: planner,
  path: onCalendar,
  headers: { "If-Match": etag, "Idempotency-Key": randomUUID() },
  body: span,
});
if (!held.data) throw new Error(`the hold answered ${held.response.status}`);
report("hold", { agent: "planner", id: held.data.id, status: held.data.status, ...span });

const refused = await createHold({
  client: rival,
  path: onCalendar,
  headers: { "Idempotency-Key": randomUUID() },
  body: span,
});
if (refused.response.status !== 409 || !refused.error || !("alternatives" in refused.error)) {
  throw new Error(`the second hold answered ${refused.response.status}, not a conflict with alternatives`);
}
const alternatives = refused.error.alternatives ?? [];
report("conflict", { agent: "rival", status: refused.response.status, error: refused.error.error, alternatives });
const alternative = alternatives[0];
if (!alternative) throw new Error("the conflict offered no alternative");

const rehold = await createHold({
  client: rival,
  path: onCalendar,
  headers: { "Idempotency-Key": randomUUID() },
  body: { start_time: alternative.start_time, end_time: alternative.end_time },
});
if (!rehold.data) throw new Error(`holding the alternative answered ${rehold.response.status}`);
report("hold", { agent: "rival", id: rehold.data.id, status: rehold.data.status, ...alternative });

const committed = await commitBooking({
  client: rival,
  path: onCalendar,
  headers: { "Idempotency-Key": randomUUID() },
  body: { hold_token: rehold.data.hold_token },
});
if (!committed.data) throw new Error(`the commit answered ${committed.response.status}`);
report("commit", { agent: "rival", booking_id: committed.data.id, status: committed.data.status });

const cancelled = await cancelBooking({
  client: rival,
  path: { booking_id: committed.data.id },
  headers: { "Idempotency-Key": randomUUID() },
});
if (!cancelled.data) throw new Error(`the cancel answered ${cancelled.response.status}`);
report("cancel", { agent: "rival", booking_id: cancelled.data.id, status: cancelled.data.status });
