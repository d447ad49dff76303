// Verify AgentCal's webhook deliveries (Standard Webhooks: https://www.standardwebhooks.com/).
//
// The server signs `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA256 under the endpoint's
// secret (`whsec_` + base64, shown once when the endpoint is created) and sends `v1,<base64 signature>`
// in `webhook-signature` (several, space-separated, while a secret is being rotated). Verify before
// parsing, on the raw body exactly as received, and refuse old timestamps so a captured delivery cannot
// be replayed later. Web Crypto only: the same code runs in Node, Deno, Bun, workers and browsers.
import { WebhookVerificationError } from "./errors.js";
import type { GenericWebhookEvent, WebhookEvent } from "./types.js";

export { WebhookVerificationError };
export type { WebhookEvent };

const SECRET_PREFIX = "whsec_";
export const DEFAULT_TOLERANCE_SECONDS = 5 * 60;

/** Request headers as frameworks hand them over: a Fetch `Headers`, or Node's `IncomingHttpHeaders`. */
export type WebhookHeaders = Headers | Readonly<Record<string, string | readonly string[] | undefined>>;

export interface VerifyOptions {
  /** How far the delivery's timestamp may be from now, in seconds (default 300). */
  toleranceSeconds?: number;
  /** The current time, for tests (ms since the epoch). */
  now?: number;
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() !== name) continue;
    if (typeof value === "string") return value;
    if (value !== undefined) return value.join(" ");
  }
  return undefined;
}

function base64Bytes(text: string): Uint8Array<ArrayBuffer> | undefined {
  const unpadded = text.replace(/=+$/, "");
  if (!/^[A-Za-z0-9+/]*$/.test(unpadded) || unpadded.length % 4 === 1) return undefined;
  const binary = atob(unpadded + "=".repeat((4 - (unpadded.length % 4)) % 4));
  return Uint8Array.from(binary, (char) => char.charCodeAt(0));
}

async function signingKey(secret: string): Promise<CryptoKey> {
  const raw = base64Bytes(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret);
  if (raw === undefined) throw new WebhookVerificationError("the webhook secret is not valid base64");
  if (raw.length === 0) throw new WebhookVerificationError("the webhook secret is empty");
  return globalThis.crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
}

function isEnvelope(value: unknown): value is GenericWebhookEvent {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const { id, type, timestamp, data } = value as Record<string, unknown>;
  return (
    typeof id === "string" &&
    typeof type === "string" &&
    typeof timestamp === "string" &&
    typeof data === "object" &&
    data !== null
  );
}

/**
 * Check a delivery's signature and timestamp; return its payload. Throws WebhookVerificationError when a
 * header is missing, no signature matches, the timestamp is further than the tolerance from now, or the
 * signed body is not an event.
 */
export async function verify(
  payload: string | Uint8Array,
  headers: WebhookHeaders,
  secret: string,
  options: VerifyOptions = {},
): Promise<WebhookEvent> {
  const body = typeof payload === "string" ? new TextEncoder().encode(payload) : payload;
  const msgId = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!msgId || !timestamp || !signatures) {
    throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header");
  }
  if (!/^[0-9]+$/.test(timestamp.trim())) throw new WebhookVerificationError("webhook-timestamp is not a number");
  const sentAt = Number.parseInt(timestamp.trim(), 10);
  const now = (options.now ?? Date.now()) / 1000;
  if (Math.abs(now - sentAt) > (options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS)) {
    throw new WebhookVerificationError("webhook-timestamp is outside the tolerance (replayed or clock skew)");
  }
  const key = await signingKey(secret);
  const prefix = new TextEncoder().encode(`${msgId}.${sentAt}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  let matched = false;
  for (const candidate of signatures.split(/\s+/)) {
    const [version, value] = candidate.split(",", 2);
    const signature = version === "v1" && value !== undefined ? base64Bytes(value) : undefined;
    // subtle.verify compares in constant time.
    if (signature !== undefined && (await globalThis.crypto.subtle.verify("HMAC", key, signature, signed))) {
      matched = true;
      break;
    }
  }
  if (!matched) throw new WebhookVerificationError("no webhook-signature matches");
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(body));
  } catch {
    throw new WebhookVerificationError("the signed body is not JSON");
  }
  if (!isEnvelope(parsed)) {
    throw new WebhookVerificationError("the signed body is not an event ({id, type, timestamp, data})");
  }
  // The signature proves the server sent it; the server sends the events its schema documents.
  return parsed as WebhookEvent;
}
