// `AgentCal`: the entry point. One instance per agent (per API key); its namespaces (`calendars`,
// `holds`, `bookings`, `approvals`, `events`, `inbox`, `audit`) make one API call per method through the
// retrying transport. Writes take `idempotencyKey` to pin the key yourself; by default each call makes
// its own, reused by its retries.
import { ApprovalWaitTimeout } from "./errors.js";
import type { RateLimit } from "./rateLimits.js";
import { HoldSession, type HoldCalls } from "./session.js";
import {
  type ApiRequest,
  type CallOptions,
  DEFAULT_BASE_URL,
  type QueryValue,
  Transport,
  apiBaseUrl,
  isoformat,
  sleep,
} from "./transport.js";
import type {
  Approval,
  ApprovalInput,
  AuditRecord,
  Availability,
  Booking,
  BookingStatus,
  Calendar,
  CalendarInput,
  CalendarUpdate,
  CommitInput,
  EventRecord,
  FoundHold,
  HeldHold,
  Hold,
  HoldInput,
  Identity,
  Inbox,
  MeetingSearchInput,
  MeetingTimes,
  Message,
  Moment,
  QueuedMessage,
  Slot,
  Thread,
  ThreadDetail,
} from "./types.js";

export interface ClientOptions {
  /** The agent's API key; default: the AGENTCAL_API_KEY environment variable. */
  apiKey?: string;
  /** The server's URL, with or without /v1; default: AGENTCAL_BASE_URL, else http://localhost:8000. */
  baseUrl?: string;
  /** Seconds to wait for each response (default 10). */
  timeout?: number;
  /** Retries of one call after its first attempt (default 3). */
  maxRetries?: number;
  /** Seconds one call may take with its retries (default 60). */
  retryDeadline?: number;
  /** The fetch to send with (default: the platform's). */
  fetch?: typeof fetch;
}

/** What to hold: the span, and what the hold says about the meeting. */
export interface HoldOptions extends CallOptions {
  ttlSeconds?: number;
  priority?: number;
  title?: string;
  attendees?: unknown[];
  metadata?: Record<string, unknown>;
  alsoCalendars?: string[];
  /**
   * The calendar version the plan was made on (availability's `version`, or its `etag`): the write
   * happens only if nothing changed since, else PreconditionFailed.
   */
  ifMatch?: number | string;
}

export type BookOptions = Omit<HoldOptions, "ttlSeconds">;

/** What findMeetingTime and holdMeeting look for. */
export interface MeetingSearch {
  calendars: string[];
  durationMinutes: number;
  start: Moment;
  end: Moment;
  optionalCalendars?: string[];
  minOptional?: number;
  granularityMinutes?: number;
  limit?: number;
  order?: MeetingSearchInput["order"];
}

/** Availability, with the ETag the answer carried (`"<version>"`). */
export type AvailabilityWithEtag = Availability & { readonly etag: string | undefined };

/** A listing, read page by page as it is iterated (`for await (const booking of …)`). */
export type Listing<T> = AsyncIterable<T>;

type Query = Record<string, QueryValue>;

function ifMatchHeader(ifMatch: number | string | undefined): Record<string, string> {
  if (ifMatch === undefined) return {};
  return { "If-Match": typeof ifMatch === "number" ? `"${ifMatch}"` : ifMatch };
}

function searchBody(search: MeetingSearch): MeetingSearchInput {
  if (!Number.isInteger(search.durationMinutes) || search.durationMinutes < 1) {
    throw new RangeError("durationMinutes must be a whole number of minutes, at least one");
  }
  return {
    calendars: search.calendars,
    optional_calendars: search.optionalCalendars,
    min_optional: search.minOptional,
    duration_minutes: search.durationMinutes,
    start: isoformat(search.start),
    end: isoformat(search.end),
    granularity_minutes: search.granularityMinutes,
    limit: search.limit,
    order: search.order,
  };
}

function holdBody(start: Moment, end: Moment, options: HoldOptions): HoldInput {
  return {
    start_time: isoformat(start),
    end_time: isoformat(end),
    ttl_seconds: options.ttlSeconds,
    priority: options.priority,
    title: options.title,
    attendees: options.attendees,
    metadata: options.metadata,
    also_calendars: options.alsoCalendars,
  };
}

function callOptions(options: CallOptions): CallOptions {
  return { idempotencyKey: options.idempotencyKey, timeout: options.timeout, maxRetries: options.maxRetries };
}

class Namespace {
  constructor(protected readonly transport: Transport) {}

  /** Every item of a listing, fetching each next page only when the previous one is used up. */
  protected async *iterate<T>(path: string, query: Query): AsyncGenerator<T, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.transport.json<{ results: T[]; next_cursor: string | null }>({
        method: "GET",
        path,
        query: { ...query, cursor },
      });
      yield* page.results;
      if (page.next_cursor === null) return;
      cursor = page.next_cursor;
    }
  }
}

export class Calendars extends Namespace {
  list(options: { limit?: number } = {}): Listing<Calendar> {
    return this.iterate<Calendar>("/calendars", { limit: options.limit });
  }

  get(calendarId: string): Promise<Calendar> {
    return this.transport.json({ method: "GET", path: `/calendars/${calendarId}` });
  }

  create(fields: CalendarInput, options: CallOptions = {}): Promise<Calendar> {
    return this.transport.json({ method: "POST", path: "/calendars", body: fields }, callOptions(options));
  }

  update(calendarId: string, fields: CalendarUpdate, options: CallOptions = {}): Promise<Calendar> {
    return this.transport.json(
      { method: "PATCH", path: `/calendars/${calendarId}`, body: fields },
      callOptions(options),
    );
  }

  /** Busy spans and free slots in [start, end), with the calendar's `version` (and `etag`) to write against. */
  async availability(
    calendarId: string,
    start: Moment,
    end: Moment,
    options: { durationMinutes?: number } = {},
  ): Promise<AvailabilityWithEtag> {
    const response = await this.transport.send({
      method: "GET",
      path: `/calendars/${calendarId}/availability`,
      query: { start: isoformat(start), end: isoformat(end), duration_minutes: options.durationMinutes },
    });
    const availability = (await response.json()) as Availability;
    return { ...availability, etag: response.headers.get("ETag") ?? undefined };
  }
}

export class Holds extends Namespace {
  create(calendarId: string, start: Moment, end: Moment, options: HoldOptions = {}): Promise<HeldHold> {
    const request: ApiRequest = {
      method: "POST",
      path: `/calendars/${calendarId}/holds`,
      body: holdBody(start, end, options),
      headers: ifMatchHeader(options.ifMatch),
    };
    return this.transport.json(request, callOptions(options));
  }

  get(holdId: string): Promise<Hold> {
    return this.transport.json({ method: "GET", path: `/holds/${holdId}` });
  }

  /** Extend a live hold (a heartbeat): its new `expires_at`, `ttlSeconds` from now on the server's clock. */
  heartbeat(holdId: string, holdToken: string, options: CallOptions & { ttlSeconds?: number } = {}): Promise<Hold> {
    return this.transport.json(
      { method: "POST", path: `/holds/${holdId}/extend`, body: { hold_token: holdToken, ttl_seconds: options.ttlSeconds } },
      callOptions(options),
    );
  }

  release(holdId: string, holdToken: string, options: CallOptions = {}): Promise<Hold> {
    // The token in the body: a secret in a URL ends up in access logs.
    return this.transport.json(
      { method: "DELETE", path: `/holds/${holdId}`, body: { hold_token: holdToken } },
      callOptions(options),
    );
  }

  /** Promote a hold (as holds.create returned it: only creation reveals its token) to a booking. */
  commit(hold: Hold, options: CallOptions & { fencingToken?: number } = {}): Promise<Booking> {
    if (!hold.hold_token) {
      throw new Error(`hold ${hold.id} has no hold_token: commit the Hold returned by holds.create`);
    }
    const body: CommitInput = { hold_token: hold.hold_token, fencing_token: options.fencingToken ?? hold.fencing_token };
    return this.transport.json(
      { method: "POST", path: `/calendars/${hold.calendar}/commits`, body },
      callOptions(options),
    );
  }
}

export class Bookings extends Namespace {
  /** Book a span directly: hold and commit in one atomic write. */
  commit(calendarId: string, start: Moment, end: Moment, options: BookOptions = {}): Promise<Booking> {
    const body: CommitInput = {
      start_time: isoformat(start),
      end_time: isoformat(end),
      priority: options.priority,
      title: options.title,
      attendees: options.attendees,
      metadata: options.metadata,
      also_calendars: options.alsoCalendars,
    };
    return this.transport.json(
      { method: "POST", path: `/calendars/${calendarId}/commits`, body, headers: ifMatchHeader(options.ifMatch) },
      callOptions(options),
    );
  }

  get(bookingId: string): Promise<Booking> {
    return this.transport.json({ method: "GET", path: `/bookings/${bookingId}` });
  }

  list(
    calendarId: string,
    options: { start?: Moment; end?: Moment; status?: BookingStatus; limit?: number } = {},
  ): Listing<Booking> {
    return this.iterate<Booking>(`/calendars/${calendarId}/bookings`, {
      start: options.start === undefined ? undefined : isoformat(options.start),
      end: options.end === undefined ? undefined : isoformat(options.end),
      status: options.status,
      limit: options.limit,
    });
  }

  cancel(bookingId: string, options: CallOptions = {}): Promise<Booking> {
    return this.transport.json({ method: "DELETE", path: `/bookings/${bookingId}` }, callOptions(options));
  }

  /**
   * Move one of this agent's bookings to [start, end) on every one of its calendars at once; on any
   * refusal nothing changes (SlotConflict carries `alternatives`). `fencingToken`: the booking's current
   * one, to move only what this agent last saw; `ifMatch`: the primary calendar's version.
   */
  move(
    bookingId: string,
    start: Moment,
    end: Moment,
    options: CallOptions & { fencingToken?: number; ifMatch?: number | string } = {},
  ): Promise<Booking> {
    return this.transport.json(
      {
        method: "POST",
        path: `/bookings/${bookingId}/move`,
        body: { start_time: isoformat(start), end_time: isoformat(end), fencing_token: options.fencingToken },
        headers: ifMatchHeader(options.ifMatch),
      },
      callOptions(options),
    );
  }

  /** Move a booking to the earliest time a search finds (the server searches and moves under its locks). */
  moveToFoundTime(
    bookingId: string,
    search: MeetingSearch,
    options: CallOptions & { fencingToken?: number } = {},
  ): Promise<Booking> {
    return this.transport.json(
      {
        method: "POST",
        path: `/bookings/${bookingId}/move`,
        body: { search: searchBody(search), fencing_token: options.fencingToken },
      },
      callOptions(options),
    );
  }
}

export class Approvals extends Namespace {
  /** Ask a person to sign off (`holdId`: the approval gates that hold's booking). */
  request(
    summary: string,
    evidence: ApprovalInput["evidence"],
    options: CallOptions & { holdId?: string; state?: unknown; expiresInSeconds?: number } = {},
  ): Promise<Approval> {
    const body: ApprovalInput = {
      summary,
      evidence,
      hold_id: options.holdId,
      expires_in_seconds: options.expiresInSeconds,
      ...(options.state === undefined ? {} : { state: options.state }),
    };
    return this.transport.json({ method: "POST", path: "/approvals", body }, callOptions(options));
  }

  get(approvalId: string): Promise<Approval> {
    return this.transport.json({ method: "GET", path: `/approvals/${approvalId}` });
  }

  list(options: { status?: string; limit?: number } = {}): Listing<Approval> {
    return this.iterate<Approval>("/approvals", { status: options.status, limit: options.limit });
  }

  cancel(approvalId: string, options: CallOptions = {}): Promise<Approval> {
    return this.transport.json({ method: "POST", path: `/approvals/${approvalId}/cancel` }, callOptions(options));
  }

  /**
   * Poll until a person decides (or the approval expires or is cancelled). Throws ApprovalWaitTimeout
   * when `timeout` seconds pass with the approval still pending.
   */
  async wait(
    approvalId: string,
    options: { timeout?: number; pollInterval?: number; maxPollInterval?: number } = {},
  ): Promise<Approval> {
    const started = performance.now();
    const deadline = started + (options.timeout ?? 600) * 1000;
    let interval = (options.pollInterval ?? 1) * 1000;
    for (;;) {
      const approval = await this.get(approvalId);
      if (approval.status !== "pending") return approval;
      const left = deadline - performance.now();
      if (left <= 0) throw new ApprovalWaitTimeout(approval, (performance.now() - started) / 1000);
      await sleep(Math.min(interval, left));
      interval = Math.min((options.maxPollInterval ?? 30) * 1000, interval * 2);
    }
  }
}

export class Events extends Namespace {
  /** The events addressed to this agent, newest first, with their deliveries. */
  list(options: { type?: string; limit?: number } = {}): Listing<EventRecord> {
    return this.iterate<EventRecord>("/events", { type: options.type, limit: options.limit });
  }
}

export class InboxNamespace extends Namespace {
  get(): Promise<Inbox> {
    return this.transport.json({ method: "GET", path: "/inbox" });
  }

  threads(options: { limit?: number } = {}): Listing<Thread> {
    return this.iterate<Thread>("/inbox/threads", { limit: options.limit });
  }

  thread(threadId: string): Promise<ThreadDetail> {
    return this.transport.json({ method: "GET", path: `/inbox/threads/${threadId}` });
  }

  messages(options: { thread?: string; since?: Moment; limit?: number } = {}): Listing<Message> {
    return this.iterate<Message>("/inbox/messages", {
      thread: options.thread,
      since: options.since === undefined ? undefined : isoformat(options.since),
      limit: options.limit,
    });
  }

  message(messageId: string): Promise<Message> {
    return this.transport.json({ method: "GET", path: `/inbox/messages/${messageId}` });
  }

  raw(messageId: string): Promise<Uint8Array> {
    return this.transport.bytes({ method: "GET", path: `/inbox/messages/${messageId}/raw` });
  }

  attachment(messageId: string, attachmentId: string): Promise<Uint8Array> {
    return this.transport.bytes({ method: "GET", path: `/inbox/messages/${messageId}/attachments/${attachmentId}` });
  }

  reply(
    messageId: string,
    text: string,
    options: CallOptions & { html?: string; replyAll?: boolean } = {},
  ): Promise<QueuedMessage> {
    return this.transport.json(
      {
        method: "POST",
        path: `/inbox/messages/${messageId}/reply`,
        body: { text, html: options.html, reply_all: options.replyAll },
      },
      callOptions(options),
    );
  }

  send(
    to: string[],
    subject: string,
    text: string,
    options: CallOptions & { cc?: string[]; html?: string; inviteBookingId?: string } = {},
  ): Promise<QueuedMessage> {
    const invite = options.inviteBookingId === undefined ? undefined : { booking_id: options.inviteBookingId };
    return this.transport.json(
      { method: "POST", path: "/inbox/send", body: { to, cc: options.cc, subject, text, html: options.html, invite } },
      callOptions(options),
    );
  }
}

export class Audit extends Namespace {
  list(
    options: {
      eventType?: string;
      agent?: string;
      calendar?: string;
      outcome?: string;
      since?: Moment;
      until?: Moment;
      overlapsStart?: Moment;
      overlapsEnd?: Moment;
      limit?: number;
    } = {},
  ): Listing<AuditRecord> {
    const time = (moment: Moment | undefined): string | undefined => (moment === undefined ? undefined : isoformat(moment));
    return this.iterate<AuditRecord>("/audit", {
      event_type: options.eventType,
      agent: options.agent,
      calendar: options.calendar,
      outcome: options.outcome,
      since: time(options.since),
      until: time(options.until),
      overlaps_start: time(options.overlapsStart),
      overlaps_end: time(options.overlapsEnd),
      limit: options.limit,
    });
  }
}

function environment(name: string): string | undefined {
  const found = globalThis.process?.env?.[name];
  return found === "" ? undefined : found;
}

/**
 * The AgentCal API for one agent (one API key).
 *
 * ```ts
 * const client = new AgentCal(); // AGENTCAL_API_KEY, AGENTCAL_BASE_URL
 * const slot = await client.findFreeSlot(["cal_a", "cal_b"], 30, start, end);
 * const session = await client.hold("cal_a", slot.start_time, slot.end_time, { alsoCalendars: ["cal_b"] });
 * try { const booking = await session.commit(); } finally { await session.close(); }
 * ```
 */
export class AgentCal {
  readonly calendars: Calendars;
  readonly holds: Holds;
  readonly bookings: Bookings;
  readonly approvals: Approvals;
  readonly events: Events;
  readonly inbox: InboxNamespace;
  readonly audit: Audit;
  private readonly transport: Transport;

  constructor(options: ClientOptions = {}) {
    const apiKey = options.apiKey ?? environment("AGENTCAL_API_KEY");
    if (!apiKey) throw new Error("no API key: pass apiKey or set AGENTCAL_API_KEY");
    const timeout = options.timeout ?? 10;
    const maxRetries = options.maxRetries ?? 3;
    const retryDeadline = options.retryDeadline ?? 60;
    if (!(timeout > 0) || maxRetries < 0 || retryDeadline < 0) {
      throw new RangeError("timeout must be positive, maxRetries and retryDeadline not negative");
    }
    this.transport = new Transport({
      apiKey,
      baseUrl: apiBaseUrl(options.baseUrl ?? environment("AGENTCAL_BASE_URL") ?? DEFAULT_BASE_URL),
      timeout,
      maxRetries,
      retryDeadline,
      fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
    });
    this.calendars = new Calendars(this.transport);
    this.holds = new Holds(this.transport);
    this.bookings = new Bookings(this.transport);
    this.approvals = new Approvals(this.transport);
    this.events = new Events(this.transport);
    this.inbox = new InboxNamespace(this.transport);
    this.audit = new Audit(this.transport);
  }

  get baseUrl(): string {
    return this.transport.settings.baseUrl;
  }

  /**
   * The request budget the last answer reported (undefined before any answer carried one). Once it
   * reaches 0 remaining, the next request waits for a token before it is sent.
   */
  get rateLimit(): RateLimit | undefined {
    return this.transport.pacer.last;
  }

  /** Who this key is: its agent (and priorities), workspace, scopes, limits, and any pause. */
  me(): Promise<Identity> {
    return this.transport.json({ method: "GET", path: "/me" });
  }

  /**
   * Spans of `durationMinutes` in [start, end) free on every calendar, found by the server in one read.
   * No candidates is an answer, not an error: see `reasons`. Reading is not reserving: hold one next.
   */
  findMeetingTime(search: MeetingSearch): Promise<MeetingTimes> {
    return this.transport.json({ method: "POST", path: "/availability/search", body: searchBody(search) });
  }

  /** The earliest span of `durationMinutes` in [start, end) free in every calendar, or undefined. */
  async findFreeSlot(calendars: string[], durationMinutes: number, start: Moment, end: Moment): Promise<Slot | undefined> {
    const found = await this.findMeetingTime({ calendars, durationMinutes, start, end, limit: 1 });
    const first = found.candidates[0];
    return first === undefined ? undefined : { start_time: first.start_time, end_time: first.end_time };
  }

  /**
   * Find a time as findMeetingTime does and hold it on every calendar, in one write (a time taken
   * meanwhile is skipped, never double-held). Throws NoSlotFound (`reasons`) when no time suits.
   */
  holdMeeting(search: MeetingSearch, options: Omit<HoldOptions, "alsoCalendars" | "ifMatch"> = {}): Promise<FoundHold> {
    return this.transport.json(
      {
        method: "POST",
        path: "/holds",
        body: {
          search: searchBody(search),
          ttl_seconds: options.ttlSeconds,
          priority: options.priority,
          title: options.title,
          attendees: options.attendees,
          metadata: options.metadata,
        },
      },
      callOptions(options),
    );
  }

  /**
   * Hold [start, end) and keep the hold alive while the agent thinks: the session heartbeats every third
   * of the TTL until `commit()`, `release()` or `close()`. Call `close()` in a `finally` (or
   * `await using session = …`): it releases an uncommitted hold and throws a loss the heartbeat found.
   */
  async hold(calendarId: string, start: Moment, end: Moment, options: HoldOptions = {}): Promise<HoldSession> {
    const hold = await this.holds.create(calendarId, start, end, options);
    return new HoldSession(hold, this.sessionCalls(), options.ttlSeconds, this.transport.settings.timeout);
  }

  /**
   * `hold()` around `work`: the hold heartbeats while `work` runs and is released if `work` ends without
   * committing it (by throwing or not).
   */
  async withHold<T>(
    calendarId: string,
    start: Moment,
    end: Moment,
    options: HoldOptions,
    work: (session: HoldSession) => Promise<T>,
  ): Promise<T> {
    const session = await this.hold(calendarId, start, end, options);
    let result: T;
    try {
      result = await work(session);
    } catch (error) {
      await session.close().catch(() => undefined); // the work's own error is the one to report
      throw error;
    }
    await session.close();
    return result;
  }

  private sessionCalls(): HoldCalls {
    return {
      extend: (holdId, holdToken, ttlSeconds, options) => this.holds.heartbeat(holdId, holdToken, { ...options, ttlSeconds }),
      release: (holdId, holdToken) => this.holds.release(holdId, holdToken),
      commit: (hold, holdToken, fencingToken) =>
        this.holds.commit({ ...hold, hold_token: holdToken }, fencingToken === undefined ? {} : { fencingToken }),
    };
  }
}
