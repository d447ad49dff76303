// The API's shapes, read off the generated schema by path and method rather than by component name:
// the server may rename or split a component (a request body becoming a union of named schemas, say)
// and these stay right after `npm run generate` without an edit here.
import type { paths, webhooks } from "./generated/schema.js";

type Method = "get" | "post" | "patch" | "delete";
type Path = keyof paths;
type Operation<P extends Path, M extends Method> = NonNullable<paths[P][M]>;
type Json<R> = R extends { content: { "application/json": infer T } } ? T : never;
type Success = 200 | 201 | 202;

/** The JSON a successful answer to `M P` carries. */
export type ResponseOf<P extends Path, M extends Method> =
  Operation<P, M> extends { responses: infer R } ? Json<R[keyof R & Success]> : never;

/** The JSON body `M P` takes. */
export type BodyOf<P extends Path, M extends Method> =
  Operation<P, M> extends { requestBody?: infer B } ? Json<NonNullable<B>> : never;

/** The query parameters `M P` takes. */
export type QueryOf<P extends Path, M extends Method> =
  Operation<P, M> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

type ItemOf<Listing> = Listing extends { results: (infer T)[] } ? T : never;

export type Identity = ResponseOf<"/v1/me", "get">;
export type Calendar = ResponseOf<"/v1/calendars/{calendar_id}", "get">;
export type CalendarInput = BodyOf<"/v1/calendars", "post">;
export type CalendarUpdate = BodyOf<"/v1/calendars/{calendar_id}", "patch">;
export type Availability = ResponseOf<"/v1/calendars/{calendar_id}/availability", "get">;
export type BusySpan = Availability["busy"][number];
/** A span of time: an availability's free slot, a conflict's alternative, a search's window. */
export interface Slot {
  start_time: string;
  end_time: string;
}
export type MeetingSearchInput = BodyOf<"/v1/availability/search", "post">;
export type MeetingTimes = ResponseOf<"/v1/availability/search", "post">;
export type MeetingCandidate = MeetingTimes["candidates"][number];
export type Hold = ResponseOf<"/v1/holds/{hold_id}", "get">;
/** A hold as its creation answers it: the only answer that carries its `hold_token`. */
export type HeldHold = ResponseOf<"/v1/calendars/{calendar_id}/holds", "post">;
export type FoundHold = ResponseOf<"/v1/holds", "post">;
export type HoldInput = BodyOf<"/v1/calendars/{calendar_id}/holds", "post">;
export type CommitInput = BodyOf<"/v1/calendars/{calendar_id}/commits", "post">;
export type Booking = ResponseOf<"/v1/bookings/{booking_id}", "get">;
export type BookingStatus = QueryOf<"/v1/calendars/{calendar_id}/bookings", "get"> extends { status?: infer S }
  ? NonNullable<S>
  : string;
export type Approval = ResponseOf<"/v1/approvals/{approval_id}", "get">;
export type ApprovalInput = BodyOf<"/v1/approvals", "post">;
export type EventRecord = ItemOf<ResponseOf<"/v1/events", "get">>;
export type Inbox = ResponseOf<"/v1/inbox", "get">;
export type Thread = ItemOf<ResponseOf<"/v1/inbox/threads", "get">>;
export type ThreadDetail = ResponseOf<"/v1/inbox/threads/{thread_id}", "get">;
export type Message = ResponseOf<"/v1/inbox/messages/{message_id}", "get">;
export type QueuedMessage = ResponseOf<"/v1/inbox/send", "post">;
export type AuditRecord = ItemOf<ResponseOf<"/v1/audit", "get">>;

/** A moment as the API takes it: a Date, or an RFC 3339 string with an offset. */
export type Moment = Date | string;

/** Any delivery's payload, as Standard Webhooks envelopes it. */
export interface GenericWebhookEvent {
  readonly id: string;
  readonly type: string;
  readonly timestamp: string;
  readonly data: Readonly<Record<string, unknown>>;
}

type WebhookPayload<Hook> = Hook extends { post: { requestBody: infer B } } ? Json<B> : never;
type DocumentedWebhookEvents = { [Name in keyof webhooks]: WebhookPayload<webhooks[Name]> }[keyof webhooks];

/**
 * A delivery's payload: the union of the events the schema documents (narrow it on `type`), or the
 * generic envelope while the schema documents none.
 */
export type WebhookEvent = [DocumentedWebhookEvents] extends [never] ? GenericWebhookEvent : DocumentedWebhookEvents;
