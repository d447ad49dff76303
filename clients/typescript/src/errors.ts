// Every error the client throws, one class per problem an agent reacts to differently.
//
// The server answers failures as RFC 9457 problem+json with a machine code in `error`;
// `errorFromResponse` turns that code into the class that names it (an unknown code falls back to the
// class for the HTTP status, so a new server code still lands in the right family). Each class's comment
// says what an agent should do about it. The classes and the retry rule mirror the Python client's.
import type { Approval, Slot } from "./types.js";

/** A problem document: RFC 9457 members plus the problem's own (`alternatives`, `quota`, …). */
export type ProblemBody = Readonly<Record<string, unknown>>;

export interface ErrorDetails {
  status?: number | undefined;
  code?: string | undefined;
  body?: ProblemBody | undefined;
  requestId?: string | undefined;
  retryAfter?: number | undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Something went wrong talking to AgentCal. Catch a subclass to react to one problem; the base class
 * is for logging. `status` is the HTTP status (undefined when no response arrived), `code` the
 * problem's machine code, `detail` a sentence for people, `body` the whole problem document.
 */
export class AgentCalError extends Error {
  static readonly defaultCode: string = "error";
  readonly detail: string;
  readonly status: number | undefined;
  readonly code: string;
  readonly body: ProblemBody;
  readonly requestId: string | undefined;
  /** Seconds the server asked us to wait (the Retry-After header), when it said. */
  readonly retryAfter: number | undefined;
  /** How many times the client sent the request before giving up with this error. */
  attempts = 1;

  constructor(detail: string, details: ErrorDetails = {}) {
    const code = details.code ?? (new.target as typeof AgentCalError).defaultCode;
    super(details.status !== undefined ? `${details.status} ${code}: ${detail}` : `${code}: ${detail}`);
    this.name = new.target.name;
    this.detail = detail;
    this.status = details.status;
    this.code = code;
    this.body = details.body ?? {};
    this.requestId = details.requestId;
    this.retryAfter = details.retryAfter;
  }

  /**
   * Whether sending the same request again (same Idempotency-Key) may succeed by waiting alone. The
   * client has already done so for these errors, up to its `maxRetries` and `retryDeadline`.
   */
  get retryable(): boolean {
    return isRetryable(this);
  }

  protected string(name: string): string | undefined {
    const found = this.body[name];
    return typeof found === "string" ? found : undefined;
  }

  protected integer(name: string): number | undefined {
    const found = this.body[name];
    return typeof found === "number" && Number.isInteger(found) ? found : undefined;
  }

  protected record(name: string): Record<string, unknown> {
    const found = this.body[name];
    return isRecord(found) ? found : {};
  }
}

// --- 400 ---------------------------------------------------------------------------------------------

/** The request is malformed; `errors` maps each field to what is wrong. Fix the arguments. */
export class InvalidRequest extends AgentCalError {
  static override readonly defaultCode: string = "invalid_request";
  get errors(): Record<string, unknown> {
    return this.record("errors");
  }
}

/** The span is unusable (end not after start, no offset, in the past). Re-plan with a future span. */
export class InvalidRange extends InvalidRequest {
  static override readonly defaultCode: string = "invalid_range";
}

// --- 401 / 403 ---------------------------------------------------------------------------------------

/** The API key is missing, malformed, revoked or expired. A person has to give the agent a working key. */
export class AuthenticationError extends AgentCalError {
  static override readonly defaultCode: string = "unauthenticated";
}

/** The key is valid but may not do this. Do not retry; report it to a person. */
export class PermissionDenied extends AgentCalError {
  static override readonly defaultCode: string = "forbidden";
}

/** The key lacks the scope this endpoint needs (the detail names it). */
export class InsufficientScope extends PermissionDenied {
  static override readonly defaultCode: string = "insufficient_scope";
}

/** The priority asked for is above this agent's maximum. Ask again with a lower one (or none). */
export class PriorityNotAllowed extends PermissionDenied {
  static override readonly defaultCode: string = "priority_not_allowed";
}

/** Another agent made this hold or booking: only its owner may change it. Leave it alone. */
export class NotOwner extends PermissionDenied {
  static override readonly defaultCode: string = "not_owner";
}

/** The hold token does not belong to this hold: use the one returned when the hold was created. */
export class HoldTokenMismatch extends PermissionDenied {
  static override readonly defaultCode: string = "hold_token_mismatch";
}

// --- 404 ---------------------------------------------------------------------------------------------

/** No such object in this agent's workspace. Check the id; do not retry with the same one. */
export class NotFound extends AgentCalError {
  static override readonly defaultCode: string = "not_found";
}

// --- 409 ---------------------------------------------------------------------------------------------

/** The request conflicts with the current state. Re-read the state and re-plan. */
export class Conflict extends AgentCalError {
  static override readonly defaultCode: string = "conflict";
}

/**
 * The span overlaps a reservation this request may not take over. Do NOT retry the same span: pick one
 * of `alternatives` (free spans of the same length, nearest first) or re-read availability.
 * `conflicting` describes the blocker; when it is a hold, `conflicting.expires_at` says when it lapses.
 */
export class SlotConflict extends Conflict {
  static override readonly defaultCode: string = "slot_conflict";

  get alternatives(): Slot[] {
    const found = this.body["alternatives"];
    if (!Array.isArray(found)) return [];
    return found.flatMap((item: unknown): Slot[] =>
      isRecord(item) && typeof item["start_time"] === "string" && typeof item["end_time"] === "string"
        ? [{ start_time: item["start_time"], end_time: item["end_time"] }]
        : [],
    );
  }

  get conflicting(): Record<string, unknown> {
    return this.record("conflicting");
  }

  get conflictingBucket(): string | undefined {
    return this.string("conflicting_bucket");
  }

  /** The blocker's priority; undefined for upstream busy time, which no priority takes over. */
  get heldByPriority(): number | undefined {
    return this.integer("held_by_priority");
  }

  get callerPriority(): number | undefined {
    return this.integer("caller_priority");
  }

  /** Why the span is refused when it is not an overlap: "buffer" near something live. */
  get reason(): string | undefined {
    const found = this.conflicting["reason"];
    return typeof found === "string" ? found : undefined;
  }
}

/** holdMeeting found no time that suits every required calendar; `reasons` says why. Widen the search. */
export class NoSlotFound extends Conflict {
  static override readonly defaultCode: string = "no_slot_found";

  get reasons(): Record<string, boolean> {
    const reasons: Record<string, boolean> = {};
    for (const [name, value] of Object.entries(this.record("reasons"))) {
      if (typeof value === "boolean") reasons[name] = value;
    }
    return reasons;
  }

  get searched(): Record<string, unknown> {
    return this.record("searched");
  }
}

/** The hold can no longer be extended, committed or released (see the subclass for why). */
export class HoldNotLive extends Conflict {
  static override readonly defaultCode: string = "hold_not_live";
}

/** The hold lapsed without a heartbeat. Re-read availability and hold again. */
export class HoldExpired extends HoldNotLive {
  static override readonly defaultCode: string = "hold_expired";
}

/** A higher-priority request (or the owner's own event) took the slot. Pick another slot. */
export class HoldEvicted extends HoldNotLive {
  static override readonly defaultCode: string = "hold_evicted";
}

/** The hold was already released. Hold again if the meeting is still wanted. */
export class HoldReleased extends HoldNotLive {
  static override readonly defaultCode: string = "hold_released";
}

/** The hold is already a booking (`bookingId`): read that booking. */
export class HoldAlreadyCommitted extends HoldNotLive {
  static override readonly defaultCode: string = "hold_already_committed";
  get bookingId(): string | undefined {
    return this.string("booking_id");
  }
}

/** An approval gates this hold; the server commits or releases it with the decision. Wait for it. */
export class HoldAwaitingApproval extends HoldNotLive {
  static override readonly defaultCode: string = "hold_awaiting_approval";
}

/** A newer fencing token was issued for an overlapping span: this view is stale. Re-read and re-plan. */
export class StaleFencingToken extends Conflict {
  static override readonly defaultCode: string = "stale_fencing_token";
}

/** The booking was already cancelled or bumped (`bookingStatus`, `bumpedAt`). */
export class BookingNotLive extends Conflict {
  static override readonly defaultCode: string = "booking_not_live";
  get bookingStatus(): string | undefined {
    return this.string("booking_status");
  }
  get bumpedAt(): string | undefined {
    return this.string("bumped_at");
  }
}

/**
 * An earlier attempt with this Idempotency-Key is still running. The client waits and retries this itself;
 * seeing it means the earlier attempt outlived the retries: read the state before acting.
 */
export class IdempotencyInProgress extends Conflict {
  static override readonly defaultCode: string = "idempotency_in_progress";
}

/** A pending approval already gates this hold (`approvalId`): wait for that one. */
export class ApprovalExists extends Conflict {
  static override readonly defaultCode: string = "approval_exists";
  get approvalId(): string | undefined {
    return this.string("approval_id");
  }
  get holdId(): string | undefined {
    return this.string("hold_id");
  }
}

/** The approval was decided (or cancelled) before this request. Read it and act on its decision. */
export class ApprovalAlreadyDecided extends Conflict {
  static override readonly defaultCode: string = "approval_already_decided";
  get approvalId(): string | undefined {
    return this.string("approval_id");
  }
  get approvalStatus(): string | undefined {
    return this.string("approval_status");
  }
}

/** No one decided the approval before it expired; treat it as a no. */
export class ApprovalExpired extends Conflict {
  static override readonly defaultCode: string = "approval_expired";
  get approvalId(): string | undefined {
    return this.string("approval_id");
  }
}

// --- 412 / 413 / 422 ---------------------------------------------------------------------------------

/** The calendar changed since the version sent as If-Match. Re-read availability and decide again. */
export class PreconditionFailed extends AgentCalError {
  static override readonly defaultCode: string = "precondition_failed";
}

/** The request body is over the server's limit. Send less. */
export class PayloadTooLarge extends AgentCalError {
  static override readonly defaultCode: string = "payload_too_large";
}

/** The request is well-formed but cannot be done as asked. Change it. */
export class UnprocessableEntity extends AgentCalError {
  static override readonly defaultCode: string = "unprocessable_entity";
}

/** The span is longer than the calendar allows (`maxAllowedMinutes`). Nothing was written. */
export class BookingTooLong extends UnprocessableEntity {
  static override readonly defaultCode: string = "booking_too_long";
  get maxAllowedMinutes(): number | undefined {
    return this.integer("max_allowed_minutes");
  }
  get requestedMinutes(): number | undefined {
    return this.integer("requested_minutes");
  }
}

/** The span is outside `calendar`'s working hours (in its `timezone`). Pick a time inside them. */
export class OutsideWorkingHours extends UnprocessableEntity {
  static override readonly defaultCode: string = "outside_working_hours";
  get calendar(): string | undefined {
    return this.string("calendar");
  }
  get timezone(): string | undefined {
    return this.string("timezone");
  }
  get hoursThatDay(): Record<string, unknown> {
    return this.record("hours_that_day");
  }
}

/** The span starts sooner than the calendar allows; start at `earliestStartTime` or later. */
export class InsufficientNotice extends UnprocessableEntity {
  static override readonly defaultCode: string = "insufficient_notice";
  get calendar(): string | undefined {
    return this.string("calendar");
  }
  get minNoticeMinutes(): number | undefined {
    return this.integer("min_notice_minutes");
  }
  get earliestStartTime(): string | undefined {
    return this.string("earliest_start_time");
  }
}

/** This Idempotency-Key was used with a different request: a programming error. */
export class IdempotencyKeyReused extends UnprocessableEntity {
  static override readonly defaultCode: string = "idempotency_key_reused";
}

// --- 423 / 429 ---------------------------------------------------------------------------------------

/**
 * A person paused this agent (`paused`: "agent") or its workspace ("workspace"): an emergency stop.
 * Nothing was written. Stop acting and tell the owner; the client never retries this. Reads still work.
 */
export class AgentPaused extends AgentCalError {
  static override readonly defaultCode: string = "agent_paused";
  get paused(): string | undefined {
    return this.string("paused");
  }
  get pausedAt(): string | undefined {
    return this.string("paused_at");
  }
}

/**
 * Too many requests (`limitName`: "requests", "searches", "in_flight"). The client already waited
 * `retryAfter` seconds and retried up to its limit; seeing this means the load persists: slow down.
 */
export class RateLimited extends AgentCalError {
  static override readonly defaultCode: string = "rate_limited";
  get limitName(): string | undefined {
    return this.string("limit_name");
  }
}

/**
 * A budget of this agent is used up (`quota`: live_holds, bookings_per_day, inbox sends). Not retried
 * automatically: decide whether to wait `retryAfter` seconds, do less, or tell a person.
 */
export class QuotaExceeded extends RateLimited {
  static override readonly defaultCode: string = "quota_exceeded";
  get quota(): string | undefined {
    return this.string("quota");
  }
  get limit(): number | undefined {
    return this.integer("limit");
  }
  get windowSeconds(): number | undefined {
    return this.integer("window_seconds");
  }
}

// --- 5xx and no answer -------------------------------------------------------------------------------

/** The server failed. 502 and 504 were retried (same Idempotency-Key); a 500 is not: report it. */
export class ServerError extends AgentCalError {
  static override readonly defaultCode: string = "server_error";
}

/** A server AgentCal depends on was unreachable; nothing was written. Retried; safe to try again later. */
export class ServiceUnavailable extends ServerError {
  static override readonly defaultCode: string = "service_unavailable";
}

/**
 * No response arrived (connection refused or reset). Retried up to the limit. A write may or may not
 * have happened: repeat the call with the same `idempotencyKey` to find out safely.
 */
export class APIConnectionError extends AgentCalError {
  static override readonly defaultCode: string = "connection_error";
}

/** No response arrived within the timeout. As APIConnectionError. */
export class APITimeoutError extends APIConnectionError {
  static override readonly defaultCode: string = "timeout";
}

// --- Client-side -------------------------------------------------------------------------------------

/** approvals.wait gave up while the approval was still pending (`approval`). */
export class ApprovalWaitTimeout extends AgentCalError {
  static override readonly defaultCode: string = "approval_wait_timeout";
  readonly approval: Approval;
  constructor(approval: Approval, waitedSeconds: number) {
    super(`Approval ${approval.id} is still pending after ${Math.round(waitedSeconds)} s.`);
    this.approval = approval;
  }
}

/** A webhook delivery did not verify. Answer it with 400 and do not act on its content. */
export class WebhookVerificationError extends AgentCalError {
  static override readonly defaultCode: string = "webhook_verification_failed";
}

// --- The retry rule ----------------------------------------------------------------------------------

/**
 * The one retry rule: no answer, 429 rate_limited, 502/503/504, and an earlier attempt of the same call
 * still running. Never a quota, nor a pause (423), nor any other 4xx: a 409, 412 or 422 means the world
 * differs from the agent's plan, and repeating the plan cannot fix that.
 */
export function isRetryable(error: AgentCalError): boolean {
  if (error instanceof QuotaExceeded) return false;
  if (error instanceof APIConnectionError || error instanceof RateLimited || error instanceof IdempotencyInProgress) {
    return true;
  }
  return error.status === 502 || error.status === 503 || error.status === 504;
}

// --- From a response to its error --------------------------------------------------------------------

type ErrorClass = (new (detail: string, details?: ErrorDetails) => AgentCalError) & { readonly defaultCode: string };

const BY_CODE: ReadonlyMap<string, ErrorClass> = new Map(
  (
    [
      InvalidRequest,
      InvalidRange,
      AuthenticationError,
      PermissionDenied,
      InsufficientScope,
      PriorityNotAllowed,
      NotOwner,
      HoldTokenMismatch,
      NotFound,
      SlotConflict,
      NoSlotFound,
      HoldExpired,
      HoldEvicted,
      HoldReleased,
      HoldAlreadyCommitted,
      HoldAwaitingApproval,
      StaleFencingToken,
      BookingNotLive,
      IdempotencyInProgress,
      ApprovalExists,
      ApprovalAlreadyDecided,
      ApprovalExpired,
      PreconditionFailed,
      PayloadTooLarge,
      BookingTooLong,
      OutsideWorkingHours,
      InsufficientNotice,
      IdempotencyKeyReused,
      AgentPaused,
      RateLimited,
      QuotaExceeded,
      ServiceUnavailable,
    ] satisfies ErrorClass[]
  ).map((cls) => [cls.defaultCode, cls]),
);

const BY_STATUS: ReadonlyMap<number, ErrorClass> = new Map<number, ErrorClass>([
  [400, InvalidRequest],
  [401, AuthenticationError],
  [403, PermissionDenied],
  [404, NotFound],
  [409, Conflict],
  [412, PreconditionFailed],
  [413, PayloadTooLarge],
  [422, UnprocessableEntity],
  [423, AgentPaused],
  [429, RateLimited],
  [503, ServiceUnavailable],
]);

/**
 * The class for a problem: the one its code names, else the one for its HTTP status. A code whose class
 * belongs to another status (a proxy reusing a name) counts for nothing.
 */
export function errorClassFor(status: number, code: string | undefined): ErrorClass {
  const family = BY_STATUS.get(status) ?? (status >= 500 ? ServerError : AgentCalError);
  const byCode = code !== undefined ? BY_CODE.get(code) : undefined;
  return byCode !== undefined && (byCode === family || byCode.prototype instanceof family) ? byCode : family;
}

/**
 * The error for a non-2xx answer; `body` is the parsed JSON (anything, when the answer was not a problem
 * document: a proxy's HTML page, say), `text` the raw text for the detail then.
 */
export function errorFromResponse(
  status: number,
  body: unknown,
  options: { text?: string; requestId?: string | undefined; retryAfter?: number | undefined } = {},
): AgentCalError {
  const problem: ProblemBody = isRecord(body) ? body : {};
  const code = typeof problem["error"] === "string" ? problem["error"] : undefined;
  const given = problem["detail"];
  const detail =
    typeof given === "string" && given !== "" ? given : (options.text ?? "").trim().slice(0, 300) || `HTTP ${status}`;
  const cls = errorClassFor(status, code);
  return new cls(detail, {
    status,
    code: code ?? `http_${status}`,
    body: problem,
    requestId: options.requestId,
    retryAfter: options.retryAfter,
  });
}
