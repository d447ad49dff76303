// A hold that stays alive while the agent thinks, and never lingers or vanishes unnoticed.
//
// The session heartbeats every third of the TTL on a timer. An eviction, expiry or release the heartbeat
// learns is kept and thrown by `commit()`, `check()` or `close()`. Closing without committing releases
// the hold. A hold an approval gates is left to the approval: no heartbeat, no release.
import { AgentCalError, APIConnectionError, HoldAwaitingApproval, HoldNotLive } from "./errors.js";
import type { CallOptions, Transport } from "./transport.js";
import type { Booking, Hold } from "./types.js";

// Wait after a failed beat before the next try, as a fraction of the beat interval (at least MIN).
const RETRY_FRACTION = 0.25;
const MIN_RETRY_MS = 100;

/** What a session needs from the client: the calls it makes on its hold's behalf. */
export interface HoldCalls {
  extend(holdId: string, holdToken: string, ttlSeconds: number | undefined, options: CallOptions): Promise<Hold>;
  release(holdId: string, holdToken: string): Promise<Hold>;
  commit(hold: Hold, holdToken: string, fencingToken: number | undefined): Promise<Booking>;
}

function ttlMs(hold: Hold, requested: number | undefined): number {
  if (requested !== undefined) return requested * 1000;
  if (!hold.expires_at) throw new Error(`hold ${hold.id} has no expiry to keep alive`);
  // The server's clock on both ends: its expiry minus its creation.
  return Math.max(1000, Date.parse(hold.expires_at) - Date.parse(hold.created_at));
}

export class HoldSession {
  private current: Hold;
  private readonly token: string;
  private readonly intervalMs: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private beating: Promise<void> | undefined;
  private stopped = true;
  private failure: AgentCalError | undefined;
  private reported = false; // the failure was already thrown to the agent (not again on close)
  private settled = false; // committed, released, or handed to an approval: nothing to release

  constructor(
    hold: Hold,
    private readonly calls: HoldCalls,
    private readonly requestedTtl: number | undefined,
    private readonly timeoutSeconds: number,
  ) {
    if (!hold.hold_token) throw new Error(`hold ${hold.id} has no hold_token: only its creation reveals it`);
    this.current = hold;
    this.token = hold.hold_token;
    this.intervalMs = ttlMs(hold, requestedTtl) / 3;
    this.startHeartbeat();
  }

  /** The hold as last seen (after creation, and after each heartbeat). */
  get hold(): Hold {
    return this.current;
  }

  get id(): string {
    return this.current.id;
  }

  /** Whether the hold was committed, released or handed to an approval. */
  get isSettled(): boolean {
    return this.settled;
  }

  /** Throw what the heartbeat found (HoldEvicted, HoldExpired, …), if anything. */
  check(): void {
    if (this.failure !== undefined) {
      this.reported = true;
      throw this.failure;
    }
  }

  /** Promote the hold to a booking with its fencing token; stops the heartbeat. */
  async commit(options: { fencingToken?: number } = {}): Promise<Booking> {
    await this.stopHeartbeat();
    this.check();
    let booking: Booking;
    try {
      booking = await this.calls.commit(this.current, this.token, options.fencingToken);
    } catch (error) {
      if (error instanceof HoldNotLive) {
        this.settled = true;
        this.failure = error;
        this.reported = true;
      } else {
        this.startHeartbeat(); // the hold may still be live: keep it so while the agent decides
      }
      throw error;
    }
    this.settled = true;
    return booking;
  }

  /** Give the slot back now. */
  async release(): Promise<Hold> {
    await this.stopHeartbeat();
    this.check();
    this.settled = true;
    return this.calls.release(this.id, this.token);
  }

  /**
   * End the session: stop the heartbeat and, unless it was committed or released, release the hold.
   * Throws the loss the heartbeat found if it was never thrown to the agent.
   */
  async close(): Promise<void> {
    await this.stopHeartbeat();
    if (!this.settled && this.failure === undefined) {
      this.settled = true;
      try {
        await this.calls.release(this.id, this.token);
      } catch (error) {
        if (error instanceof HoldAwaitingApproval) return; // the approval decides; the server releases it on a no
        if (!(error instanceof HoldNotLive)) throw error;
        this.failure ??= error; // lost before the heartbeat noticed: say so all the same
      }
    }
    if (this.failure !== undefined && !this.reported) {
      this.reported = true;
      throw this.failure;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private startHeartbeat(): void {
    this.stopped = false;
    this.schedule(this.intervalMs);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.beating = this.beat().finally(() => {
        this.beating = undefined;
      });
    }, Math.max(0, delayMs));
    // A forgotten session must not keep the process alive.
    if (typeof this.timer === "object" && typeof this.timer.unref === "function") this.timer.unref();
  }

  private async stopHeartbeat(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.beating; // a beat on its way finishes first, so its answer cannot land after a commit
  }

  private async beat(): Promise<void> {
    const sentAt = performance.now();
    try {
      const hold = await this.calls.extend(this.id, this.token, this.requestedTtl, {
        timeout: Math.min(this.intervalMs / 1000, this.timeoutSeconds),
        maxRetries: 0, // this loop retries, on its own schedule
      });
      this.current = hold.hold_token ? hold : { ...hold, hold_token: this.token };
      this.schedule(sentAt + this.intervalMs - performance.now());
    } catch (caught) {
      const error = caught instanceof AgentCalError ? caught : new APIConnectionError(String(caught));
      if (error instanceof HoldAwaitingApproval) {
        this.settled = true; // the approval keeps it alive and decides its fate
        return;
      }
      if (error.retryable) {
        this.schedule(Math.max(MIN_RETRY_MS, this.intervalMs * RETRY_FRACTION));
        return; // the network or the server hiccuped: beat again soon
      }
      this.failure = error;
      this.stopped = true;
    }
  }
}
