/**
 * `deno task demo`: a one-minute tour against a running `deno task dev`. Creates three accounts,
 * a profile with an avatar, posts, a reply, follows, a like and a repost through the client,
 * waits for the index, then prints a home timeline, a thread and the notifications.
 *
 * Reads `PDS_PUBLIC_URL` and `APPVIEW_PUBLIC_URL` (the `dev` defaults otherwise). Needs
 * `PDS_INVITE_REQUIRED=false` (the `dev` default).
 */

import { type Post, SocialClient } from "../shared/client.ts";

/** A 1x1 PNG, the demo avatar. */
const AVATAR_PNG = Uint8Array.from(
  atob(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
  ),
  (c) => c.charCodeAt(0),
);

interface DemoOptions {
  pdsUrl: string;
  appviewUrl: string;
  /** Where lines go (stdout by default). */
  print?: (line: string) => void;
  /** How long to wait for the index, in ms. */
  timeoutMs?: number;
}

/** Runs the tour; returns the printed lines. */
export async function runDemo(opts: DemoOptions): Promise<string[]> {
  const lines: string[] = [];
  const print = (line: string) => {
    lines.push(line);
    (opts.print ?? console.log)(line);
  };
  const suffix = Date.now().toString(36).slice(-6);
  const password = `demo-password-${suffix}`;
  const client = () => new SocialClient({ pdsUrl: opts.pdsUrl, appviewUrl: opts.appviewUrl });
  const [alice, bob, carol] = [client(), client(), client()];
  const a = await alice.createAccount({ handle: `alice-${suffix}.test`, password });
  const b = await bob.createAccount({ handle: `bob-${suffix}.test`, password });
  const c = await carol.createAccount({ handle: `carol-${suffix}.test`, password });
  print(`created accounts: @${a.handle}, @${b.handle}, @${c.handle}`);

  const avatar = await alice.uploadBlob(AVATAR_PNG, "image/png");
  await alice.updateProfile({ displayName: "Alice", description: "Trying out the demo", avatar });
  print(`alice set her profile (avatar ${avatar.ref.$link})`);

  await alice.follow(b.did);
  await bob.follow(a.did);
  await carol.follow(a.did);
  print("alice and bob follow each other; carol follows alice");

  const hello = await alice.post({ text: `Hello from the demo ${suffix}!`, langs: ["en"] });
  const reply = await bob.post({ text: "Welcome, Alice!", reply: { parent: hello } });
  await carol.post({ text: `Carol was here too ${suffix}` });
  await alice.like(reply);
  await bob.repost(hello);
  await carol.like(hello);
  print("alice posted; bob replied and reposted; alice liked the reply; carol liked the post");

  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  let thread = await bob.thread(hello.uri, b.did);
  while (
    (thread.replies.length < 1 || thread.like_count !== 1 || thread.repost_count !== 1) &&
    Date.now() < deadline
  ) {
    await new Promise((r) => setTimeout(r, 100));
    thread = await bob.thread(hello.uri, b.did);
  }
  if (thread.replies.length < 1) throw new Error("The index did not show the reply in time");

  print("");
  print(`home timeline of @${b.handle}:`);
  const { posts } = await bob.timeline({ limit: 10 });
  for (const post of posts) print(`  ${formatPost(post)}`);

  print("");
  print("thread:");
  if (thread.post) print(`  ${formatPost(thread.post)}`);
  print(`    likes ${thread.like_count ?? 0}, reposts ${thread.repost_count ?? 0}`);
  for (const r of thread.replies) print(`    reply: ${formatPost(r)}`);

  print("");
  const unread = await alice.notificationCount();
  print(`notifications of @${a.handle} (${unread.count} unread):`);
  const { notifications } = await alice.notifications({ limit: 20 });
  for (const n of notifications) {
    print(`  ${n.kind} from @${n.author_handle}${n.subject_text ? `: "${n.subject_text}"` : ""}`);
  }
  const seen = await alice.markSeen(notifications[0]?.indexed_at ?? null);
  print(`marked ${seen.updated} notifications read`);
  return lines;
}

function formatPost(post: Post): string {
  return `@${post.handle}: ${post.text}`;
}

if (import.meta.main) {
  // Where `deno task dev` listens: its URLs, else localhost on its ports.
  const env = (name: string) => Deno.env.get(name)?.trim() || undefined;
  const pdsUrl = env("PDS_PUBLIC_URL") ?? `http://localhost:${env("PDS_PORT") ?? 2583}`;
  const appviewUrl = env("APPVIEW_PUBLIC_URL") ?? `http://localhost:${env("APPVIEW_PORT") ?? 3000}`;
  try {
    await runDemo({ pdsUrl, appviewUrl });
  } catch (err) {
    console.error(`demo failed: ${err instanceof Error ? err.message : err}`);
    console.error(`is \`deno task dev\` running (account host ${pdsUrl}, index ${appviewUrl})?`);
    Deno.exit(1);
  }
}
