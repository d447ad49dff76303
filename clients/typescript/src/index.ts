export * from "./client.js";
export * from "./errors.js";
export { type RateLimit, parseRateLimit } from "./rateLimits.js";
export { HoldSession } from "./session.js";
export { type CallOptions, newIdempotencyKey, parseRetryAfter } from "./transport.js";
export * from "./types.js";
export { VERSION } from "./version.js";
export * as webhooks from "./webhooks.js";
