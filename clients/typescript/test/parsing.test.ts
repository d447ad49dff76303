// What the client reads off answers, without a server: Retry-After, the RateLimit-* headers.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { parseRateLimit, parseRetryAfter } from "agentcal";

describe("Retry-After", () => {
  test("seconds, an HTTP-date, or nothing usable", () => {
    assert.equal(parseRetryAfter("3"), 3);
    assert.equal(parseRetryAfter(" 0 "), 0);
    const now = Date.parse("2030-01-07T09:15:00Z");
    assert.equal(parseRetryAfter("Mon, 07 Jan 2030 09:15:30 GMT", now), 30);
    assert.equal(parseRetryAfter("Mon, 07 Jan 2030 09:14:00 GMT", now), 0, "a date in the past means now");
    assert.equal(parseRetryAfter("soon"), undefined);
    assert.equal(parseRetryAfter(null), undefined);
  });
});

describe("RateLimit headers", () => {
  test("the budget, its refill window, or nothing when a header is missing", () => {
    const read = parseRateLimit(
      new Headers({ "RateLimit-Limit": "10", "RateLimit-Remaining": "12", "RateLimit-Reset": "2", "RateLimit-Policy": "10;w=5" }),
    );
    assert.ok(read !== undefined);
    assert.deepEqual([read.limit, read.remaining, read.resetSeconds, read.windowSeconds], [10, 10, 2, 5]);
    assert.equal(parseRateLimit(new Headers({ "RateLimit-Limit": "10", "RateLimit-Remaining": "1" })), undefined);
    assert.equal(
      parseRateLimit(new Headers({ "RateLimit-Limit": "ten", "RateLimit-Remaining": "1", "RateLimit-Reset": "1" })),
      undefined,
    );
  });
});
