// HTTP with the retry rules agents get wrong when they write them by hand.
//
// Every write carries an Idempotency-Key made once per logical call and reused by each of its retries.
// Only what waiting can fix is retried (errors.isRetryable), with decorrelated jitter or the server's
// Retry-After, bounded by `maxRetries` and a total deadline per call. Every answer's RateLimit-* headers
// are read (Pacer); once the agent's bucket is seen empty, the next request first waits for a token,
// within the same deadline.
import { APIConnectionError, APITimeoutError, type AgentCalError, errorFromResponse, isRetryable } from "./errors.js";
import { Pacer } from "./rateLimits.js";
import { VERSION } from "./version.js";

export const DEFAULT_BASE_URL = "http://localhost:8000";
const WRITE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);
const FIRST_WAIT_SECONDS = 0.5;
const MAX_WAIT_SECONDS = 30;
// Longest Retry-After obeyed as such; a longer one ends the retries (the deadline would pass anyway).
const MAX_RETRY_AFTER_SECONDS = 60;

export type HttpMethod = "GET" | "POST" | "PATCH" | "DELETE";
export type QueryValue = string | number | boolean | Date | undefined | null;

/** One API request, described; the transport sends it (and resends it on retries). */
export interface ApiRequest {
  method: HttpMethod;
  /** Below the base URL, e.g. "/holds/hld_123". */
  path: string;
  query?: Record<string, QueryValue> | undefined;
  body?: unknown;
  headers?: Record<string, string> | undefined;
}

/** Per-call options every method takes. */
export interface CallOptions {
  /** Pin the Idempotency-Key of a write (by default each call makes its own, reused by its retries). */
  idempotencyKey?: string | undefined;
  /** Seconds to wait for each response. */
  timeout?: number | undefined;
  /** Retries after the first attempt for this call. */
  maxRetries?: number | undefined;
}

export interface Settings {
  apiKey: string;
  baseUrl: string;
  timeout: number;
  maxRetries: number;
  retryDeadline: number;
  fetch: typeof fetch;
}

export function newIdempotencyKey(): string {
  return `agentcal-ts-${globalThis.crypto.randomUUID()}`;
}

/** A Date as the API's RFC 3339 UTC form; a string is passed on as given (it must carry an offset). */
export function isoformat(moment: Date | string): string {
  if (typeof moment === "string") return moment;
  if (Number.isNaN(moment.getTime())) throw new RangeError("an invalid Date cannot be sent as a time");
  return moment.toISOString();
}

/** Seconds from a Retry-After header (delta-seconds or an HTTP-date), undefined if absent or garbled. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^[0-9]+$/.test(trimmed)) return Number.parseInt(trimmed.slice(0, 7), 10);
  const when = Date.parse(trimmed);
  return Number.isNaN(when) ? undefined : Math.max(0, (when - now) / 1000);
}

/** The API root: the server's URL with /v1, whether or not it was given with it. */
export function apiBaseUrl(baseUrl: string): string {
  const base = baseUrl.replace(/\/+$/, "");
  return base.endsWith("/v1") ? base : `${base}/v1`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The retries left to one logical call: how long to wait before the next attempt, or undefined when the
 * error is final (not retryable, no retries left, or the wait would pass the deadline).
 */
export class RetryBudget {
  private retriesLeft: number;
  private readonly deadline: number;
  private previousWait = FIRST_WAIT_SECONDS;
  attempts = 1;

  constructor(maxRetries: number, deadlineSeconds: number) {
    this.retriesLeft = maxRetries;
    this.deadline = performance.now() + deadlineSeconds * 1000;
  }

  /** Seconds to wait before retrying after `error`, or undefined to give up. */
  waitBeforeRetry(error: AgentCalError): number | undefined {
    if (!isRetryable(error) || this.retriesLeft <= 0) return undefined;
    let wait: number;
    if (error.retryAfter !== undefined) {
      if (error.retryAfter > MAX_RETRY_AFTER_SECONDS) return undefined;
      wait = error.retryAfter;
    } else {
      const low = FIRST_WAIT_SECONDS;
      const high = this.previousWait * 3;
      wait = Math.min(MAX_WAIT_SECONDS, low + Math.random() * (high - low));
    }
    if (performance.now() + wait * 1000 > this.deadline) return undefined;
    this.previousWait = Math.max(wait, FIRST_WAIT_SECONDS);
    this.retriesLeft -= 1;
    this.attempts += 1;
    return wait;
  }

  /** The longest wait for the rate limit worth taking before an attempt (ms); pacing spends no retry. */
  longestPacingWaitMs(): number {
    return Math.min(MAX_RETRY_AFTER_SECONDS * 1000, this.deadline - performance.now());
  }
}

function url(settings: Settings, request: ApiRequest): string {
  const target = new URL(settings.baseUrl + request.path);
  for (const [name, value] of Object.entries(request.query ?? {})) {
    if (value === undefined || value === null) continue;
    target.searchParams.set(name, value instanceof Date ? isoformat(value) : String(value));
  }
  return target.toString();
}

function noResponse(error: unknown, request: ApiRequest): AgentCalError {
  const what = `${request.method} ${request.path}`;
  const name = error instanceof Error ? error.name : "Error";
  if (name === "TimeoutError" || name === "AbortError") {
    return new APITimeoutError(`${what}: no response in time (${name})`);
  }
  const cause = error instanceof Error && error.cause instanceof Error ? ` (${error.cause.message})` : "";
  return new APIConnectionError(`${what}: ${String(error)}${cause}`);
}

async function errorFor(response: Response): Promise<AgentCalError> {
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return errorFromResponse(response.status, body, {
    text: body === undefined ? text : "",
    requestId: response.headers.get("X-Request-ID") ?? undefined,
    retryAfter: parseRetryAfter(response.headers.get("Retry-After")),
  });
}

export class Transport {
  readonly pacer = new Pacer();

  constructor(readonly settings: Settings) {}

  /** Send `request` with retries; the successful Response (its body unread), or throw the final error. */
  async send(request: ApiRequest, options: CallOptions = {}): Promise<Response> {
    const { settings } = this;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${settings.apiKey}`,
      Accept: "application/json",
      "User-Agent": `agentcal-client-typescript/${VERSION}`,
      ...request.headers,
    };
    if (WRITE_METHODS.has(request.method)) {
      headers["Idempotency-Key"] = options.idempotencyKey ?? newIdempotencyKey();
    }
    let body: string | undefined;
    if (request.body !== undefined) {
      body = JSON.stringify(request.body);
      headers["Content-Type"] = "application/json";
    }
    const target = url(settings, request);
    // AbortSignal.timeout takes whole milliseconds only.
    const timeoutMs = Math.max(1, Math.ceil((options.timeout ?? settings.timeout) * 1000));
    const budget = new RetryBudget(options.maxRetries ?? settings.maxRetries, settings.retryDeadline);
    for (;;) {
      const pacing = this.pacer.reserve(budget.longestPacingWaitMs());
      if (pacing > 0) await sleep(pacing);
      let error: AgentCalError;
      try {
        const response = await settings.fetch(target, {
          method: request.method,
          headers,
          body,
          signal: AbortSignal.timeout(timeoutMs),
        });
        this.pacer.observe(response.headers);
        if (response.status < 400) return response;
        error = await errorFor(response);
      } catch (caught) {
        error = noResponse(caught, request);
      }
      const wait = budget.waitBeforeRetry(error);
      if (wait === undefined) {
        error.attempts = budget.attempts;
        throw error;
      }
      await sleep(wait * 1000);
    }
  }

  /** Send `request` and read its JSON answer as `T` (the schema's type for that operation). */
  async json<T>(request: ApiRequest, options: CallOptions = {}): Promise<T> {
    const response = await this.send(request, options);
    return (await response.json()) as T;
  }

  /** Send `request` and read its answer as bytes. */
  async bytes(request: ApiRequest, options: CallOptions = {}): Promise<Uint8Array> {
    const response = await this.send(request, options);
    return new Uint8Array(await response.arrayBuffer());
  }
}
