import assert from "node:assert/strict";
import { REPO_ROOT, taskCommand, taskPermissionSet } from "../../runtime/_test_helpers.ts";
import { makeTempDir, serveOnPort0 } from "../../runtime/_test_helpers.ts";
import {
  checkDestination,
  type HostLookup,
  safeFetch,
  SafeFetchError,
  USER_AGENT,
} from "./safe_fetch.ts";

// Issue 9: outbound fetches are bounded (size, redirects, time) and refuse private, loopback and
// link-local addresses unless allowed. Spec 4.3 rule 1 and part 8: 2 s per request.

/** A real loopback server that counts its requests. */
function countingServer(handler: (req: Request) => Response | Promise<Response>) {
  let hits = 0;
  const server = serveOnPort0((req) => {
    hits++;
    return handler(req);
  });
  return { server, hits: () => hits };
}

async function refusal(p: Promise<unknown>): Promise<SafeFetchError> {
  const e = await p.then(() => null, (e) => e);
  assert.ok(e instanceof SafeFetchError, `expected SafeFetchError, got ${e}`);
  return e;
}

const noLookup: HostLookup = () => Promise.reject(new Error("DNS must not be asked"));

Deno.test("safeFetch refuses loopback, private, link-local, unspecified and mapped literals", async () => {
  const urls: [string, string][] = [
    ["http://10.0.0.1/x", "private address: 10.0.0.1"],
    ["http://172.16.5.4/", "private address: 172.16.5.4"],
    ["https://192.168.1.1/", "private address: 192.168.1.1"],
    ["http://169.254.169.254/latest/meta-data/", "link-local address: 169.254.169.254"],
    ["http://0.0.0.0/", "unspecified address: 0.0.0.0"],
    ["http://2130706433/", "loopback address: 127.0.0.1"],
    ["http://[::1]/", "loopback address: [::1]"],
    ["http://[fe80::1]/", "link-local address: [fe80::1]"],
    ["http://[fd00::1]/", "unique-local address: [fd00::1]"],
    ["http://[::ffff:127.0.0.1]/", "mapped address: [::ffff:7f00:1]"],
    ["http://[::]/", "unspecified address: [::]"],
  ];
  for (const [url, message] of urls) {
    const e = await refusal(safeFetch(url, { lookup: noLookup }));
    assert.equal(e.reason, "refused", url);
    assert.ok(e.message.includes(message), `${url}: ${e.message}`);
  }
});

Deno.test("safeFetch refuses localhost and a real loopback server without connecting", async () => {
  const { server, hits } = countingServer(() => new Response("secret"));
  try {
    for (const url of [server.url, `http://localhost:${server.port}/`, "http://a.localhost/"]) {
      const e = await refusal(safeFetch(url, { lookup: noLookup }));
      assert.equal(e.reason, "refused");
      assert.match(e.message, /^Destination is a loopback address: /);
    }
    assert.equal(hits(), 0);
  } finally {
    await server.close();
  }
});

Deno.test("checkDestination refuses a host name any of whose addresses is private", async () => {
  const lookup: HostLookup = (host) =>
    Promise.resolve(
      host === "intranet.example.com"
        ? ["127.0.0.1"]
        : host === "mixed.example.com"
        ? ["93.184.215.14", "10.9.8.7"]
        : host === "empty.example.com"
        ? []
        : ["93.184.215.14", "2606:4700:4700::1111"],
    );
  const intranet = await refusal(
    checkDestination(new URL("https://intranet.example.com/.well-known/did.json"), lookup),
  );
  assert.equal(intranet.reason, "refused");
  assert.equal(
    intranet.message,
    "Destination is a loopback address: intranet.example.com (127.0.0.1) in " +
      "https://intranet.example.com/.well-known/did.json",
  );
  const mixed = await refusal(checkDestination(new URL("https://mixed.example.com/"), lookup));
  assert.ok(mixed.message.includes("private address: mixed.example.com (10.9.8.7)"));
  const empty = await refusal(checkDestination(new URL("https://empty.example.com/"), lookup));
  assert.equal(empty.reason, "network");
  assert.equal(empty.message, "Host has no addresses: empty.example.com");
  await checkDestination(new URL("https://public.example.com/"), lookup);
  await checkDestination(new URL("https://8.8.8.8/"), noLookup);
});

Deno.test("safeFetch reaches loopback when allowPrivate is set and reads the body", async () => {
  await using server = serveOnPort0((req) =>
    Response.json({ method: req.method, body: req.body ? "yes" : "no" })
  );
  const res = await safeFetch(`${server.url}/doc`, { allowPrivate: true });
  assert.equal(res.status, 200);
  assert.deepEqual(JSON.parse(new TextDecoder().decode(res.body)), { method: "GET", body: "no" });
});

Deno.test("safeFetch rejects a body above maxBytes, declared or streamed", async () => {
  const big = "x".repeat(70 * 1024);
  await using server = serveOnPort0((req) => {
    if (new URL(req.url).pathname === "/declared") return new Response(big);
    const stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < 70; i++) c.enqueue(new Uint8Array(1024));
        c.close();
      },
    });
    return new Response(stream);
  });
  const declared = await refusal(safeFetch(`${server.url}/declared`, { allowPrivate: true }));
  assert.equal(declared.reason, "too_large");
  assert.equal(
    declared.message,
    `Response from ${server.url}/declared is ${70 * 1024} bytes (max 65536)`,
  );
  const streamed = await refusal(safeFetch(`${server.url}/streamed`, { allowPrivate: true }));
  assert.equal(streamed.reason, "too_large");
  assert.equal(streamed.message, `Response from ${server.url}/streamed exceeds 65536 bytes`);
  const small = await safeFetch(`${server.url}/declared`, { allowPrivate: true, maxBytes: 80_000 });
  assert.equal(small.body.byteLength, 70 * 1024);
});

Deno.test("safeFetch follows at most 3 redirects and refuses a non-http Location", async () => {
  await using server = serveOnPort0((req) => {
    const path = new URL(req.url).pathname;
    const n = Number(path.slice(1));
    if (path === "/file") return Response.redirect("file:///etc/passwd", 302);
    if (n > 0) return new Response(null, { status: 302, headers: { location: `/${n - 1}` } });
    return new Response("end");
  });
  const three = await safeFetch(`${server.url}/3`, { allowPrivate: true });
  assert.equal(three.url, `${server.url}/0`);
  assert.equal(new TextDecoder().decode(three.body), "end");
  const four = await refusal(safeFetch(`${server.url}/4`, { allowPrivate: true }));
  assert.equal(four.reason, "redirects");
  assert.equal(four.message, `Too many redirects from ${server.url}/4`);
  const file = await refusal(safeFetch(`${server.url}/file`, { allowPrivate: true }));
  assert.equal(file.reason, "refused");
  assert.equal(file.message, "Scheme not allowed: file:///etc/passwd");
});

Deno.test("safeFetch turns a POST into a GET on 303 and keeps it on 307", async () => {
  const seen: string[] = [];
  await using server = serveOnPort0(async (req) => {
    const path = new URL(req.url).pathname;
    seen.push(`${req.method} ${path} ${await req.text()}`);
    if (path === "/see-other") {
      return new Response(null, { status: 303, headers: { location: "/end" } });
    }
    if (path === "/temporary") {
      return new Response(null, { status: 307, headers: { location: "/end" } });
    }
    return new Response("ok");
  });
  await safeFetch(`${server.url}/see-other`, { method: "POST", body: "a", allowPrivate: true });
  await safeFetch(`${server.url}/temporary`, { method: "POST", body: "b", allowPrivate: true });
  assert.deepEqual(seen, ["POST /see-other a", "GET /end ", "POST /temporary b", "POST /end b"]);
});

Deno.test("safeFetch abandons a request that gets no answer within the timeout", async () => {
  let aborted = false;
  await using server = serveOnPort0((req) =>
    new Promise<Response>((resolve) => {
      req.signal.addEventListener("abort", () => {
        aborted = true;
        resolve(new Response(null, { status: 499 }));
      });
    })
  );
  const started = performance.now();
  const e = await refusal(safeFetch(server.url, { allowPrivate: true, timeoutMs: 150 }));
  const elapsed = performance.now() - started;
  assert.equal(e.reason, "timeout");
  assert.equal(e.message, `No answer within 150 ms: ${server.url}/`);
  assert.ok(elapsed >= 140 && elapsed < 1000, `elapsed ${elapsed}`);
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(aborted, true);
});

Deno.test("safeFetch reports the caller's abort as aborted", async () => {
  await using server = serveOnPort0((req) =>
    new Promise<Response>((resolve) => {
      req.signal.addEventListener("abort", () => resolve(new Response(null)));
    })
  );
  const controller = new AbortController();
  const pending = safeFetch(server.url, { allowPrivate: true, signal: controller.signal });
  controller.abort();
  const e = await refusal(pending);
  assert.equal(e.reason, "aborted");
});

Deno.test("safeFetch connects to the address its lookup answered, not to a second resolution", async () => {
  // `.invalid` never resolves (RFC 6761): only a connection pinned to the looked-up address
  // reaches the server. With `fetch`, which resolves the name again, this is a network error.
  await using server = serveOnPort0((req) => new Response(`host ${req.headers.get("host")}`));
  const lookups: string[] = [];
  const lookup: HostLookup = (host) => {
    lookups.push(host);
    return Promise.resolve(["127.0.0.1"]);
  };
  const url = `http://rebind.invalid:${server.port}/doc`;
  const res = await safeFetch(url, { allowPrivate: true, lookup });
  assert.equal(res.status, 200);
  assert.equal(res.url, url);
  assert.equal(new TextDecoder().decode(res.body), `host rebind.invalid:${server.port}`);
  assert.deepEqual(lookups, ["rebind.invalid"]);
});

/**
 * A self-signed certificate for `pinned.test` (P-256, valid 2020-2120), test use only: the
 * HTTPS test below serves it on loopback and trusts it alone.
 */
const PINNED_TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBZDCCAQqgAwIBAgIBATAKBggqhkjOPQQDAjAWMRQwEgYDVQQDDAtwaW5uZWQu
dGVzdDAgFw0yMDAxMDEwMDAwMDBaGA8yMTIwMDEwMTAwMDAwMFowFjEUMBIGA1UE
AwwLcGlubmVkLnRlc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQqAyuPvkKK
8aBfGB+4Ko7Zp/o9mjokUnnc6CMuFCxrK87tqQOlkkkt4GUW35qZxNrLe8k6Iexh
33C/CNkHvVsgo0cwRTAWBgNVHREEDzANggtwaW5uZWQudGVzdDAMBgNVHRMBAf8E
AjAAMB0GA1UdDgQWBBSgGjzqk8MCeGyZc/HKjcQm6UYkvDAKBggqhkjOPQQDAgNI
ADBFAiAeu9o/eAabuU0Akv8CL/xJuhx+7lmSqvirP0OdPtgUuQIhAM6hbm9YtWvh
DY5V9OW0EncAJf8lSR39ATHnWmO3/bO4
-----END CERTIFICATE-----`;
const PINNED_TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgP5RdqgsdckWPpROe
liFcdEdYViFH1mnydin8WIxnw/yhRANCAAQqAyuPvkKK8aBfGB+4Ko7Zp/o9mjok
Unnc6CMuFCxrK87tqQOlkkkt4GUW35qZxNrLe8k6Iexh33C/CNkHvVsg
-----END PRIVATE KEY-----`;

Deno.test("safeFetch over HTTPS connects to the checked address and verifies the host name", async () => {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: PINNED_TEST_CERT, key: PINNED_TEST_KEY, onListen() {} },
    (req) => new Response(`tls ${req.headers.get("host")}`),
  );
  try {
    const port = server.addr.port;
    const lookup: HostLookup = () => Promise.resolve(["127.0.0.1"]);
    const opts = { allowPrivate: true, lookup, caCerts: [PINNED_TEST_CERT] };
    const res = await safeFetch(`https://pinned.test:${port}/`, opts);
    assert.equal(res.status, 200);
    assert.equal(new TextDecoder().decode(res.body), `tls pinned.test:${port}`);
    // Same address, another name: the certificate does not name it.
    const e = await refusal(safeFetch(`https://other.test:${port}/`, opts));
    assert.equal(e.reason, "network");
    assert.match(e.message, /^Request failed: https:\/\/other\.test:\d+\/: .*other\.test/);
  } finally {
    await server.shutdown();
  }
});

Deno.test("safeFetch sends a user-agent and accept, and times out a body that stalls", async () => {
  const seen: string[] = [];
  await using server = serveOnPort0((req) => {
    seen.push(`${req.headers.get("user-agent")} | ${req.headers.get("accept")}`);
    if (new URL(req.url).pathname !== "/stall") return new Response("ok");
    // The head and 3 of 100 bytes, then nothing.
    const body = new ReadableStream({ start: (c) => c.enqueue(new Uint8Array(3)) });
    return new Response(body, { headers: { "content-length": "100" } });
  });
  await safeFetch(`${server.url}/`, { allowPrivate: true });
  await safeFetch(`${server.url}/`, { allowPrivate: true, headers: { accept: "text/plain" } });
  assert.deepEqual(seen, [`${USER_AGENT} | */*`, `${USER_AGENT} | text/plain`]);
  const e = await refusal(safeFetch(`${server.url}/stall`, { allowPrivate: true, timeoutMs: 200 }));
  assert.equal(e.reason, "timeout");
  assert.equal(e.message, `No answer within 200 ms: ${server.url}/stall`);
});

Deno.test("under the handle-sync task's permissions, HTTPS verifies against the default and extra roots", async () => {
  // node:https loads its roots with sys and env permissions the task must grant (needed once
  // NODE_EXTRA_CA_CERTS is set); without them every HTTPS fetch fails before the certificate
  // is even looked at.
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", REPO_ROOT)));
  const flags = taskCommand(config.tasks, "handle-sync")
    .replace(/^deno run /, "")
    .replace(/ appview\/main\.ts handle-sync$/, "")
    .split(" ");
  assert.ok(flags.every((f) => f.startsWith("-")), flags.join(" "));
  // The task's permissions are its set (`-P=<set>`), looked up in the repository's deno.json: the
  // script below sits outside it, so the run names that config.
  assert.ok(flags.includes(taskPermissionSet(config, "handle-sync").flag), flags.join(" "));
  await using dir = await makeTempDir();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: PINNED_TEST_CERT, key: PINNED_TEST_KEY, onListen() {} },
    () => new Response("tls"),
  );
  try {
    const script = `${dir.path}/fetch.ts`;
    await Deno.writeTextFile(
      script,
      `import { safeFetch } from ${JSON.stringify(new URL("safe_fetch.ts", import.meta.url).href)};
const lookup = () => Promise.resolve(["127.0.0.1"]);
const url = "https://pinned.test:${server.addr.port}/";
const out = await safeFetch(url, { allowPrivate: true, lookup })
  .then((r) => ({ status: r.status }), (e) => ({ reason: e.reason, message: e.message }));
console.log(JSON.stringify(out));
`,
    );
    const extraCa = `${dir.path}/extra-ca.pem`;
    await Deno.writeTextFile(extraCa, PINNED_TEST_CERT);
    const run = async (env: Record<string, string>) => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--quiet",
          `--config=${new URL("deno.json", REPO_ROOT).pathname}`,
          ...flags,
          script,
        ],
        cwd: dir.path,
        env,
        clearEnv: true,
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      return JSON.parse(new TextDecoder().decode(out.stdout));
    };
    // Default roots: the self-signed certificate is not trusted, and TLS says so.
    const untrusted = await run({});
    assert.equal(untrusted.reason, "network");
    assert.match(
      untrusted.message,
      /^Request failed: https:\/\/pinned\.test:\d+\/: self-signed certificate/,
    );
    // An operator's extra root (a private CA) is trusted.
    assert.deepEqual(await run({ NODE_EXTRA_CA_CERTS: extraCa }), { status: 200 });
  } finally {
    await server.shutdown();
  }
});
