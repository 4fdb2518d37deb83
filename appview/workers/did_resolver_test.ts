import assert from "node:assert/strict";
import { serveOnPort0 } from "../../runtime/_test_helpers.ts";
import { DidResolver, handleFromDocument, HandleResolutionError } from "./did_resolver.ts";
import type { HostLookup } from "./safe_fetch.ts";
import { atprotoTxtRecords } from "../_test_helpers.ts";

// Spec 4.3 rule 1: did:plc via the DID directory, did:web via HTTPS, DIDs hosted on the local
// account host via its resolveHandle (POST, the DID in `handle`; the response `handle` is used).

const LOCAL = "did:plc:localaaaaaaaaaaaaaaaaaaa";
const REMOTE = "did:plc:remoteaaaaaaaaaaaaaaaaaa";
const MISSING = "did:plc:missingaaaaaaaaaaaaaaaaa";

function didDoc(did: string, alsoKnownAs: unknown[]): Record<string, unknown> {
  return { id: did, alsoKnownAs, verificationMethod: [], service: [] };
}

/** A real account host stand-in implementing resolveHandle's POST contract, plus a directory. */
function startServers() {
  const calls: string[] = [];
  const pds = serveOnPort0(async (req) => {
    const body = await req.json();
    calls.push(`pds ${req.method} ${new URL(req.url).pathname} ${body.handle}`);
    if (body.handle === LOCAL) return Response.json({ did: LOCAL, handle: "Alice.Test" });
    return Response.json({ error: "HandleNotFound", message: "Unable to resolve handle" }, {
      status: 400,
    });
  });
  const plc = serveOnPort0((req) => {
    const did = new URL(req.url).pathname.slice(1);
    calls.push(`plc ${req.method} ${did}`);
    if (did === REMOTE) {
      return Response.json(
        didDoc(REMOTE, ["https://x", "at://not a handle", "at://Bob.Example.COM"]),
      );
    }
    return Response.json({ message: "DID not registered" }, { status: 404 });
  });
  return {
    calls,
    pds,
    plc,
    async [Symbol.asyncDispose]() {
      await pds.close();
      await plc.close();
    },
  };
}

/** The DNS of the remote handles: each names its DID back. */
const txtLookup = atprotoTxtRecords({ "bob.example.com": REMOTE });

async function failure(p: Promise<unknown>): Promise<string> {
  const e = await p.then(() => null, (e) => e);
  assert.ok(e instanceof HandleResolutionError, `expected HandleResolutionError, got ${e}`);
  return e.message;
}

Deno.test("resolveHandle asks the account host first and uses its handle, lower-cased", async () => {
  await using s = startServers();
  const resolver = new DidResolver({ pdsUrl: s.pds.url, plcUrl: s.plc.url, allowPrivate: true });
  assert.equal(await resolver.resolveHandle(LOCAL), "alice.test");
  assert.deepEqual(s.calls, [`pds POST /xrpc/com.atproto.identity.resolveHandle ${LOCAL}`]);
});

Deno.test("resolveHandle falls back to the directory when the account host answers an error", async () => {
  await using s = startServers();
  const resolver = new DidResolver({
    pdsUrl: s.pds.url,
    plcUrl: s.plc.url,
    allowPrivate: true,
    txtLookup,
  });
  assert.equal(await resolver.resolveHandle(REMOTE), "bob.example.com");
  assert.deepEqual(s.calls, [
    `pds POST /xrpc/com.atproto.identity.resolveHandle ${REMOTE}`,
    `plc GET ${REMOTE}`,
  ]);
  assert.equal(
    await failure(resolver.resolveHandle(MISSING)),
    `DID directory answered 404 for ${MISSING} (account host: Account host answered 400 for ` +
      `${MISSING} (HandleNotFound))`,
  );
});

Deno.test("resolveHandle asks the directory when the account host is unreachable", async () => {
  await using s = startServers();
  const down = serveOnPort0(() => new Response());
  await down.close();
  const resolver = new DidResolver({
    pdsUrl: down.url,
    plcUrl: s.plc.url,
    allowPrivate: true,
    txtLookup,
  });
  assert.equal(await resolver.resolveHandle(REMOTE), "bob.example.com");
});

Deno.test("resolveHandle reads a did:web document over http for localhost when allowed", async () => {
  let did = "";
  await using web = serveOnPort0((req) => {
    assert.equal(new URL(req.url).pathname, "/.well-known/did.json");
    return Response.json(didDoc(did, ["at://Carol.Example.org"]));
  });
  did = `did:web:localhost%3A${web.port}`;
  const resolver = new DidResolver({
    pdsUrl: web.url,
    plcUrl: web.url,
    allowPrivate: true,
    txtLookup: atprotoTxtRecords({ "carol.example.org": did }),
  });
  assert.equal(await resolver.resolveHandle(did), "carol.example.org");
});

Deno.test("resolveHandle refuses a did:web on a private address when not allowed", async () => {
  let hits = 0;
  await using web = serveOnPort0(() => {
    hits++;
    return Response.json({});
  });
  const lookup: HostLookup = (host) =>
    Promise.resolve(host === "intranet.example.com" ? ["127.0.0.1"] : ["10.0.0.7"]);
  const resolver = new DidResolver({
    pdsUrl: web.url,
    plcUrl: web.url,
    allowPrivate: false,
    lookup,
  });
  const local = `did:web:localhost%3A${web.port}`;
  assert.equal(
    await failure(resolver.resolveHandle(local)),
    `Could not fetch for ${local}: Destination is a loopback address: localhost in ` +
      `https://localhost:${web.port}/.well-known/did.json`,
  );
  assert.equal(
    await failure(resolver.resolveHandle("did:web:intranet.example.com")),
    "Could not fetch for did:web:intranet.example.com: Destination is a loopback address: " +
      "intranet.example.com (127.0.0.1) in https://intranet.example.com/.well-known/did.json",
  );
  assert.equal(
    await failure(resolver.resolveHandle("did:web:192.168.1.20")),
    "Could not fetch for did:web:192.168.1.20: Destination is a private address: 192.168.1.20 " +
      "in https://192.168.1.20/.well-known/did.json",
  );
  assert.equal(
    await failure(resolver.resolveHandle("did:web:169.254.169.254")),
    "Could not fetch for did:web:169.254.169.254: Destination is a link-local address: " +
      "169.254.169.254 in https://169.254.169.254/.well-known/did.json",
  );
  assert.equal(hits, 0);
});

Deno.test("resolveHandle refuses a directory on a private address when not allowed", async () => {
  await using s = startServers();
  const resolver = new DidResolver({ pdsUrl: s.pds.url, plcUrl: s.plc.url, allowPrivate: false });
  // The account host is the operator's own address: reached even on loopback.
  assert.equal(await resolver.resolveHandle(LOCAL), "alice.test");
  const message = await failure(resolver.resolveHandle(REMOTE));
  assert.ok(message.includes("Destination is a loopback address: 127.0.0.1"), message);
  assert.equal(s.calls.filter((c) => c.startsWith("plc")).length, 0);
});

Deno.test("didWebDocumentUrl maps hosts and refuses paths and ports off localhost", async () => {
  const allowed = new DidResolver({ pdsUrl: "http://x", plcUrl: "http://x", allowPrivate: true });
  const strict = new DidResolver({ pdsUrl: "http://x", plcUrl: "http://x", allowPrivate: false });
  assert.equal(
    strict.didWebDocumentUrl("did:web:Example.COM"),
    "https://example.com/.well-known/did.json",
  );
  assert.equal(
    allowed.didWebDocumentUrl("did:web:localhost%3A2583"),
    "http://localhost:2583/.well-known/did.json",
  );
  assert.equal(
    strict.didWebDocumentUrl("did:web:localhost%3A2583"),
    "https://localhost:2583/.well-known/did.json",
  );
  assert.equal(
    await failure(allowed.resolveHandle("did:web:example.com:user:alice")),
    "Path-based did:web is not supported: did:web:example.com:user:alice",
  );
  assert.equal(
    await failure(allowed.resolveHandle("did:web:example.com%3A8443")),
    "A did:web port is only allowed for localhost: did:web:example.com%3A8443",
  );
  assert.equal(
    await failure(
      allowed.resolveHandle("did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo"),
    ),
    "Unsupported DID method: did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo",
  );
  assert.equal(await failure(allowed.resolveHandle("not a did")), "Invalid DID: not a did");
});

Deno.test("handleFromDocument takes the first valid at:// handle of the matching document", () => {
  const did = "did:plc:abcabcabcabcabcabcabcabc";
  assert.equal(
    handleFromDocument(did, didDoc(did, [7, "at://", "at://Dave.Example.com", "at://e.example"])),
    "dave.example.com",
  );
  assert.throws(
    () => handleFromDocument(did, didDoc("did:plc:other", ["at://dave.example.com"])),
    {
      name: "HandleResolutionError",
      message: `DID document id does not match ${did}: did:plc:other`,
    },
  );
  assert.throws(() => handleFromDocument(did, didDoc(did, ["at://handle.invalid"])), {
    name: "HandleResolutionError",
    message: `No valid handle for ${did}: handle.invalid`,
  });
  assert.throws(() => handleFromDocument(did, { id: did }), {
    name: "HandleResolutionError",
    message: `DID document of ${did} lists no at:// handle`,
  });
  assert.throws(() => handleFromDocument(did, []), {
    name: "HandleResolutionError",
    message: `DID document of ${did} is not a JSON object`,
  });
});

Deno.test("resolveHandle rejects an oversized DID document", async () => {
  let did = "";
  await using web = serveOnPort0(() =>
    Response.json({ ...didDoc(did, ["at://big.example.com"]), pad: "x".repeat(70_000) })
  );
  did = `did:web:localhost%3A${web.port}`;
  const resolver = new DidResolver({ pdsUrl: web.url, plcUrl: web.url, allowPrivate: true });
  const message = await failure(resolver.resolveHandle(did));
  assert.ok(message.endsWith("(max 65536)"), message);
});

Deno.test("a handle from a DID document must resolve back to the DID, by DNS or atproto-did", async () => {
  await using s = startServers();
  // The handle hosts' `/.well-known/atproto-did`, served on loopback.
  const hostDid = new Map<string, string>();
  const hostPaths: string[] = [];
  await using hosts = serveOnPort0((req) => {
    const [, handle, ...rest] = new URL(req.url).pathname.split("/");
    hostPaths.push(`${handle} /${rest.join("/")}`);
    const did = hostDid.get(handle);
    return did === undefined ? new Response("not here", { status: 404 }) : new Response(did);
  });
  let txt: Record<string, string | string[]> = {};
  const resolver = new DidResolver({
    pdsUrl: s.pds.url,
    plcUrl: s.plc.url,
    allowPrivate: true,
    txtLookup: (name) => {
      const value = txt[name.slice("_atproto.".length)];
      const values = value === undefined ? [] : Array.isArray(value) ? value : [value];
      // Other TXT records beside; a record may come as several strings.
      const records = values.map((v) => [`did=${v.slice(0, 12)}`, v.slice(12)]);
      return Promise.resolve(values.length === 0 ? [] : [["v=spf1 -all"], ...records]);
    },
    handleDidUrl: (handle) => `${hosts.url}/${handle}/.well-known/atproto-did`,
  });
  const claimed = `Handle bob.example.com of ${REMOTE} does not resolve back to it`;
  const accountHost = `(account host: Account host answered 400 for ${REMOTE} (HandleNotFound))`;

  // DNS names the DID: the host is not asked.
  txt = { "bob.example.com": REMOTE };
  assert.equal(await resolver.resolveHandle(REMOTE), "bob.example.com");
  assert.deepEqual(hostPaths, []);
  // DNS names another DID.
  txt = { "bob.example.com": MISSING };
  assert.equal(
    await failure(resolver.resolveHandle(REMOTE)),
    `${claimed} (it names ${MISSING}) ${accountHost}`,
  );
  // No TXT record: the host's atproto-did names the DID (a trailing newline is fine).
  txt = {};
  hostDid.set("bob.example.com", `${REMOTE}\n`);
  assert.equal(await resolver.resolveHandle(REMOTE), "bob.example.com");
  assert.deepEqual(hostPaths, ["bob.example.com /.well-known/atproto-did"]);
  // Two did= records count as none (even the same DID twice); the host names another DID.
  for (const records of [[REMOTE, MISSING], [REMOTE, REMOTE]]) {
    txt = { "bob.example.com": records };
    hostDid.set("bob.example.com", MISSING);
    assert.equal(
      await failure(resolver.resolveHandle(REMOTE)),
      `${claimed} (it names ${MISSING}) ${accountHost}`,
    );
  }
  // Neither names one.
  txt = {};
  hostDid.delete("bob.example.com");
  assert.equal(
    await failure(resolver.resolveHandle(REMOTE)),
    `${claimed} (it names no DID) ${accountHost}`,
  );
  assert.equal(await resolver.handleDid("bob.example.com"), null);
  hostDid.set("bob.example.com", "not a did");
  assert.equal(await resolver.handleDid("bob.example.com"), null);
  // The local account host's handle is its own word: not verified back.
  assert.equal(await resolver.resolveHandle(LOCAL), "alice.test");
});
