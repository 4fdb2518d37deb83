/**
 * Waiting for the index to show a record the account host just stored: the index learns of it
 * through the push or the stream, usually within milliseconds, so a screen that shows the new
 * post asks a few times before it reloads.
 *
 * @module
 */

import type { SocialClient } from "../../shared/client.ts";

/** Resolves when the index serves the post `uri`, or after about `maxMs` anyway. */
export async function waitIndexed(client: SocialClient, uri: string, maxMs = 3000): Promise<void> {
  const until = Date.now() + maxMs;
  while (Date.now() < until) {
    try {
      if ((await client.getPost(uri)).post !== null) return;
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 150));
  }
}
