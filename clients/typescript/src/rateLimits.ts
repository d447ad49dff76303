// The agent's request budget as the server last described it, and the pacing that follows from it.
//
// Every answer carries RateLimit-Limit (the bucket's size), RateLimit-Remaining, RateLimit-Reset
// (seconds until full again) and RateLimit-Policy (`<burst>;w=<seconds to refill from empty>`). A client
// that has seen Remaining reach 0 waits for the next token before sending, instead of spending a round
// trip on a certain 429; the server's 429 and its Retry-After stay the authority when this estimate is off.

/** The RateLimit-* headers of the last answer that carried them (`client.rateLimit`). */
export interface RateLimit {
  /** Requests the bucket holds (the burst). */
  readonly limit: number;
  /** Requests left when the answer was sent. */
  readonly remaining: number;
  /** Seconds from then until the bucket is full again. */
  readonly resetSeconds: number;
  /** Seconds the bucket takes to refill from empty (RateLimit-Policy's w), when the server said. */
  readonly windowSeconds: number | undefined;
  /** When this client read the answer. */
  readonly readAt: Date;
}

function wholeNumber(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined) return undefined;
  const trimmed = value.trim();
  return /^[0-9]+$/.test(trimmed) ? Number.parseInt(trimmed.slice(0, 9), 10) : undefined;
}

function policyWindow(value: string | null): number | undefined {
  if (value === null) return undefined;
  const first = value.split(",", 1)[0] ?? "";
  for (const parameter of first.split(";").slice(1)) {
    const [name, raw] = parameter.split("=", 2);
    if (name?.trim().toLowerCase() === "w") return wholeNumber(raw);
  }
  return undefined;
}

/** Seconds the bucket takes to give one request back. */
export function secondsPerRequest(rateLimit: RateLimit): number {
  if (rateLimit.windowSeconds !== undefined && rateLimit.windowSeconds > 0) {
    return rateLimit.windowSeconds / rateLimit.limit;
  }
  return rateLimit.resetSeconds / Math.max(1, rateLimit.limit - rateLimit.remaining);
}

/**
 * The RateLimit-* headers of an answer, or undefined when Limit, Remaining or Reset is absent or not a
 * whole number (a proxy's answer, an older server): no guess is better than a wrong one.
 */
export function parseRateLimit(headers: Headers, readAt: Date = new Date()): RateLimit | undefined {
  const limit = wholeNumber(headers.get("RateLimit-Limit"));
  const remaining = wholeNumber(headers.get("RateLimit-Remaining"));
  const reset = wholeNumber(headers.get("RateLimit-Reset"));
  if (limit === undefined || remaining === undefined || reset === undefined || limit === 0) return undefined;
  return {
    limit,
    remaining: Math.min(remaining, limit),
    resetSeconds: reset,
    windowSeconds: policyWindow(headers.get("RateLimit-Policy")),
    readAt,
  };
}

/**
 * One client's view of its bucket, shared by every call in flight through that client. When the last
 * answer left no request, each caller in turn is given the next free moment (one token's refill after
 * the one before), so callers waiting together are spread out rather than all sent into a 429.
 */
export class Pacer {
  last: RateLimit | undefined;
  private nextFree: number | undefined; // performance.now() in ms when the next request may go
  private intervalMs = 0;

  observe(headers: Headers): void {
    const seenAt = performance.now();
    const rateLimit = parseRateLimit(headers);
    if (rateLimit === undefined) return;
    this.last = rateLimit;
    if (rateLimit.remaining > 0) {
      this.nextFree = undefined;
      return;
    }
    this.intervalMs = secondsPerRequest(rateLimit) * 1000;
    const firstTokenAt = seenAt + this.intervalMs;
    // Callers already given a later moment will spend the tokens before it: keep their queue.
    this.nextFree = Math.max(firstTokenAt, this.nextFree ?? firstTokenAt);
  }

  /**
   * Milliseconds to wait before sending, that moment taken from the queue; 0 when the bucket was not
   * seen empty, or when the wait would exceed `atMostMs` (send now and let the server decide).
   */
  reserve(atMostMs: number): number {
    if (this.nextFree === undefined) return 0;
    const wait = this.nextFree - performance.now();
    if (wait <= 0) {
      this.nextFree = undefined;
      return 0;
    }
    if (wait > atMostMs) return 0;
    this.nextFree += this.intervalMs;
    return wait;
  }
}
