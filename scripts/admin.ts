/**
 * The operator's command line (docs/operations.md "Operating a community"), working directly on
 * the account host's KV store like `invite` (the same `PDS_KV_PATH`; the server may be running):
 *
 * ```
 * deno task admin accounts list [--handle-prefix P] [--limit N] [--cursor C]
 * deno task admin account reset-password <handle|DID>
 * deno task admin account takedown <handle|DID> [--reason TEXT]
 * deno task admin account restore <handle|DID>
 * deno task admin account delete <handle|DID>
 * deno task admin reports list [--all]
 * deno task admin reports resolve <id> [--note TEXT]
 * deno task admin record takedown <at-uri> [--reason TEXT]
 * deno task admin record restore <at-uri>
 * deno task admin record list [--limit N] [--cursor AT-URI]
 * ```
 *
 * Every command takes `--help`. Exit codes: 0 success, 1 failure (for example an unknown account
 * or no store), 2 bad arguments.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { loadPdsConfig } from "../pds/config.ts";
import { findAccount } from "../pds/accounts/accounts.ts";
import { listAccounts } from "../pds/accounts/account_list.ts";
import { createResetToken } from "../pds/accounts/password_reset.ts";
import { setAccountStatus } from "../pds/accounts/account_status.ts";
import {
  finishAccountDeletion,
  listAccountDeletions,
  purgeAccount,
} from "../pds/accounts/account_delete.ts";
import {
  listReports,
  REPO_REF_TYPE,
  type Report,
  resolveReport,
} from "../pds/moderation/reports.ts";
import {
  listRecordTakedowns,
  MAX_TAKEDOWN_REASON,
  parseRecordUri,
  RecordTakedownError,
  restoreRecord,
  standaloneTakedownDeps,
  takeDownRecord,
} from "../pds/moderation/record_takedown.ts";
import {
  type CliIo,
  CliUsageError,
  openStoreForCli,
  parseCliArgs,
  runCliMain,
} from "./_pds_store.ts";

const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 1000;

const USAGES = {
  "accounts list":
    "admin accounts list [--handle-prefix <prefix>] [--limit <n>] [--cursor <handle>]",
  "account reset-password": "admin account reset-password <handle|DID>",
  "account takedown": "admin account takedown <handle|DID> [--reason <text>]",
  "account restore": "admin account restore <handle|DID>",
  "account delete": "admin account delete <handle|DID>",
  "reports list": "admin reports list [--all]",
  "reports resolve": "admin reports resolve <id> [--note <text>]",
  "record takedown": "admin record takedown <at-uri> [--reason <text>]",
  "record restore": "admin record restore <at-uri>",
  "record list": "admin record list [--limit <n>] [--cursor <at-uri>]",
} as const;

type CommandName = keyof typeof USAGES;

const HELP: Record<CommandName, string> = {
  "accounts list": "Lists accounts by handle: handle, DID, created, status, record count " +
    `(${DEFAULT_LIMIT} a page by default, at most ${MAX_LIMIT}); the next page's cursor is printed last.`,
  "account reset-password": "Prints a one-time password reset token (valid 1 hour) for the " +
    "member to use with com.atproto.server.resetPassword; the account's previous token stops " +
    "working. Resetting ends every session of the account.",
  "account takedown": "Takes the account down: it can no longer log in, refresh or write, the " +
    "sync endpoints refuse its repository, and an #account event (active: false, status " +
    "takendown) tells the index to hide it everywhere. The reason is kept for the operator.",
  "account restore": "Lifts a takedown: the account is active again and an #account event " +
    "(active: true) brings its content back in the index.",
  "account delete": "Deletes the account for good, as com.atproto.server.deleteAccount does " +
    "without its password or token: its repository, records, blobs, sessions and app passwords " +
    "go, its handle is free, and an #account event (active: false, status deleted) tells the " +
    "index to remove every row of it. The invite redemption log keeps its entry. Run again " +
    "with the DID (or the old handle) after an interrupted deletion, it finishes it.",
  "reports list": "Lists the members' reports, oldest first: id, created, status, reported by, " +
    "reason type, subject (DID or AT-URI), reason and the operator's note. Open ones only " +
    "unless --all.",
  "reports resolve": "Marks a report resolved, with an optional note for the record.",
  "record takedown": "Takes one record down: a commit signed with the account's key deletes it " +
    "from its repository, so the index and every other consumer drop it (and correct their " +
    "counts), and the account host keeps its exact bytes for a restore. Its author sees it as " +
    "removed by the operator, with the reason (so write it for them; at most " +
    `${MAX_TAKEDOWN_REASON} characters). The URI's authority may be a handle or a DID.`,
  "record restore": "Writes a taken-down record back by a commit, with the same bytes, CID and " +
    "URI, and drops the hold; refused when a record now exists at that path.",
  "record list": "Lists the records taken down, by URI: URI, CID, taken down, state (held, or " +
    "pending: the takedown was interrupted before its commit, run it again) and reason " +
    `(${DEFAULT_LIMIT} a page by default, at most ${MAX_LIMIT}); the next page's cursor is ` +
    "printed last.",
};

const USAGE = `Usage:\n${Object.values(USAGES).map((u) => `  ${u}`).join("\n")}`;

type Command =
  | { name: "help"; text: string }
  | { name: "accounts list"; handlePrefix?: string; limit: number; cursor?: string }
  | { name: "account reset-password" | "account delete"; account: string }
  | { name: "account takedown" | "account restore"; account: string; reason?: string }
  | { name: "reports list"; all: boolean }
  | { name: "reports resolve"; id: number; note?: string }
  | { name: "record takedown"; uri: string; reason?: string }
  | { name: "record restore"; uri: string }
  | { name: "record list"; limit: number; cursor?: string };

/** Runs the command line; returns the exit code. Output goes to `out`/`err` (lines). */
export async function runAdminCli(
  args: string[],
  env: Record<string, string | undefined>,
  io: CliIo,
): Promise<number> {
  const command = parseCliArgs("admin", io, USAGE, () => parseCommand(args));
  if (command === null) return 2;
  if (command.name === "help") {
    for (const line of command.text.split("\n")) io.out(line);
    return 0;
  }
  const config = loadPdsConfig(env);
  const kv = await openStoreForCli("admin", io, config, {
    env,
    hint: "set DATA_DIR or PDS_KV_PATH to the account host's",
  });
  if (kv === null) return 1;
  try {
    return await runCommand(kv, command, io);
  } finally {
    kv.close();
  }
}

async function runCommand(
  kv: Deno.Kv,
  command: Exclude<Command, { name: "help" }>,
  io: CliIo,
): Promise<number> {
  switch (command.name) {
    case "accounts list": {
      const page = await listAccounts(kv, command);
      io.out(["handle", "did", "created", "status", "records"].join("\t"));
      for (const a of page.accounts) {
        io.out([a.handle, a.did, a.createdAt, a.status, String(a.records)].join("\t"));
      }
      if (page.cursor !== null) io.out(`next page: --cursor ${page.cursor}`);
      return 0;
    }
    case "account reset-password": {
      const account = await findAccount(kv, command.account);
      if (account === null) {
        io.err(`admin: no account ${JSON.stringify(command.account)}`);
        return 1;
      }
      const { token, expiresAt } = await createResetToken(kv, account.did, Date.now());
      io.out(
        `Reset token for ${account.handle} (${account.did}), single use, valid until ${
          new Date(expiresAt).toISOString()
        }:`,
      );
      io.out(token);
      return 0;
    }
    case "account delete": {
      const account = await findAccount(kv, command.account);
      const event = account === null ? null : await purgeAccount(kv, account.did, Date.now());
      if (account !== null && event !== null) {
        io.out(`Deleted ${account.handle} (${account.did}); #account event seq ${event.seq}`);
        return 0;
      }
      // A deletion interrupted after its first step: the account record is gone, the marker
      // says what is left (docs/operations.md "Operating a community").
      const pending = (await listAccountDeletions(kv)).find((d) =>
        d.did === command.account || d.handle === command.account.toLowerCase()
      );
      const finished = pending && await finishAccountDeletion(kv, pending.did);
      if (!finished) {
        io.err(`admin: no account ${JSON.stringify(command.account)}`);
        return 1;
      }
      io.out(
        `Finished deleting ${finished.handle} (${finished.did}), started ${finished.startedAt}; ` +
          `it had left: ${finished.remaining.join(", ") || "a last check"}`,
      );
      return 0;
    }
    case "account takedown":
    case "account restore":
      return await runStatusCommand(kv, command, io);
    case "reports list": {
      io.out(
        ["id", "created", "status", "by", "reason_type", "subject", "reason", "note"].join("\t"),
      );
      for (const r of await listReports(kv, { all: command.all })) io.out(reportLine(r));
      return 0;
    }
    case "reports resolve": {
      const resolved = await resolveReport(kv, command.id, {
        note: command.note,
        nowMs: Date.now(),
      });
      if (typeof resolved === "string") {
        io.err(`admin: ${resolved}`);
        return 1;
      }
      io.out(`Resolved report ${resolved.id}`);
      return 0;
    }
    case "record takedown":
    case "record restore":
    case "record list":
      return await runRecordCommand(kv, command, io);
  }
}

/** `record takedown` / `restore` / `list` (docs/behaviour.md 4.1 rule 15). */
async function runRecordCommand(
  kv: Deno.Kv,
  command: Extract<Command, { name: `record ${string}` }>,
  io: CliIo,
): Promise<number> {
  if (command.name === "record list") {
    const page = await listRecordTakedowns(kv, command);
    io.out(["uri", "cid", "taken_down", "state", "reason"].join("\t"));
    for (const t of page.takedowns) {
      const reason = t.reason === undefined ? "-" : JSON.stringify(t.reason);
      io.out([t.uri, t.cid, t.createdAt, t.pending ? "pending" : "held", reason].join("\t"));
    }
    if (page.cursor !== null) io.out(`next page: --cursor ${page.cursor}`);
    return 0;
  }
  // The commit is signed here, with the account's key, like any commit of the write path.
  const deps = standaloneTakedownDeps(kv);
  try {
    if (command.name === "record restore") {
      const restored = await restoreRecord(deps, command.uri);
      io.out(
        restored.commit === null
          ? `Restored ${restored.uri} (${restored.cid}): it was still in the repository; the ` +
            "hold is dropped"
          : `Restored ${restored.uri} (${restored.cid}); commit rev ${restored.commit.rev}, ` +
            `seq ${restored.commit.seq}`,
      );
      return 0;
    }
    const result = await takeDownRecord(deps, command.uri, { reason: command.reason });
    if (result.status === "already") {
      io.out(`${result.uri} is already taken down (since ${result.hold.createdAt})`);
      return 0;
    }
    io.out(
      `Took down ${result.uri} (${result.cid}); commit rev ${result.commit.rev}, ` +
        `seq ${result.commit.seq}`,
    );
    if (result.replaced !== undefined) {
      io.out(`The version taken down before at that path (${result.replaced}) is no longer kept`);
    }
    if (!result.compacted) {
      io.out(
        "The repository changed during its compaction: run deno task compact to remove the " +
          "record's block from the store",
      );
    }
    return 0;
  } catch (err) {
    if (!(err instanceof RecordTakedownError)) throw err;
    io.err(`admin: ${err.message}`);
    return 1;
  } finally {
    await deps.close();
  }
}

/** `account takedown` / `account restore`: the status change and its `#account` event. */
async function runStatusCommand(
  kv: Deno.Kv,
  command: { name: "account takedown" | "account restore"; account: string; reason?: string },
  io: CliIo,
): Promise<number> {
  const account = await findAccount(kv, command.account);
  if (account === null) {
    io.err(`admin: no account ${JSON.stringify(command.account)}`);
    return 1;
  }
  const takedown = command.name === "account takedown";
  const result = await setAccountStatus(kv, account.did, {
    status: takedown ? "takendown" : "active",
    by: "operator",
    reason: command.reason,
    nowMs: Date.now(),
  });
  const who = `${account.handle} (${account.did})`;
  if (!result.changed) {
    if (result.reason === "unknown") {
      io.err(`admin: no account ${JSON.stringify(command.account)}`);
      return 1;
    }
    io.out(`${who} is already ${takedown ? "taken down" : "active"}`);
    return 0;
  }
  io.out(`${takedown ? "Took down" : "Restored"} ${who}; #account event seq ${result.event.seq}`);
  return 0;
}

/** One report on one line: free text as JSON strings (no tabs or newlines), `-` when absent. */
function reportLine(r: Report): string {
  const subject = r.subject.$type === REPO_REF_TYPE ? r.subject.did : r.subject.uri;
  const text = (s: string | undefined) => s === undefined ? "-" : JSON.stringify(s);
  return [
    String(r.id),
    r.createdAt,
    r.status,
    r.reportedBy,
    r.reasonType,
    subject,
    text(r.reason),
    text(r.note),
  ].join("\t");
}

function parseCommand(args: string[]): Command {
  const { values, positionals } = parseArgs({
    args,
    options: {
      help: { type: "boolean", short: "h", default: false },
      "handle-prefix": { type: "string" },
      limit: { type: "string" },
      cursor: { type: "string" },
      all: { type: "boolean", default: false },
      note: { type: "string" },
      reason: { type: "string" },
    },
    allowPositionals: true,
    strict: true,
  });
  const [group, sub, ...rest] = positionals;
  if (group === undefined) {
    if (values.help) return { name: "help", text: USAGE };
    throw new CliUsageError("missing command");
  }
  const name = `${group} ${sub ?? ""}`.trim();
  if (!(name in USAGES)) {
    if (values.help && sub === undefined) return { name: "help", text: USAGE };
    throw new CliUsageError(`unknown command ${JSON.stringify(name)}`);
  }
  const known = name as CommandName;
  const usage = `Usage: ${USAGES[known]}`;
  if (values.help) return { name: "help", text: `${usage}\n\n${HELP[known]}` };
  const only = (allowed: string[]) => {
    const given = Object.keys(values).find((o) =>
      o !== "help" && values[o as keyof typeof values] !== undefined &&
      values[o as keyof typeof values] !== false && !allowed.includes(o)
    );
    if (given !== undefined) throw new CliUsageError(`${name} takes no --${given}`, usage);
  };
  switch (known) {
    case "accounts list": {
      only(["handle-prefix", "limit", "cursor"]);
      if (rest.length > 0) {
        throw new CliUsageError(`unexpected argument ${JSON.stringify(rest[0])}`, usage);
      }
      return {
        name: known,
        handlePrefix: values["handle-prefix"],
        limit: values.limit === undefined ? DEFAULT_LIMIT : limit(values.limit, usage),
        cursor: values.cursor,
      };
    }
    case "account reset-password":
    case "account delete": {
      only([]);
      if (rest.length !== 1 || rest[0].trim() === "") {
        throw new CliUsageError(`${sub} takes exactly one handle or DID`, usage);
      }
      return { name: known, account: rest[0].trim() };
    }
    case "account takedown":
    case "account restore": {
      only(known === "account takedown" ? ["reason"] : []);
      if (rest.length !== 1 || rest[0].trim() === "") {
        throw new CliUsageError(`${sub} takes exactly one handle or DID`, usage);
      }
      return { name: known, account: rest[0].trim(), reason: values.reason };
    }
    case "reports list":
      only(["all"]);
      if (rest.length > 0) {
        throw new CliUsageError(`unexpected argument ${JSON.stringify(rest[0])}`, usage);
      }
      return { name: known, all: values.all ?? false };
    case "reports resolve": {
      only(["note"]);
      if (rest.length !== 1) throw new CliUsageError("resolve takes exactly one report id", usage);
      if (!/^[1-9]\d{0,14}$/.test(rest[0])) {
        throw new CliUsageError(
          `report id must be a positive integer, got ${JSON.stringify(rest[0])}`,
          usage,
        );
      }
      return { name: known, id: Number(rest[0]), note: values.note };
    }
    case "record takedown":
    case "record restore": {
      only(known === "record takedown" ? ["reason"] : []);
      if (rest.length !== 1) throw new CliUsageError(`${sub} takes exactly one AT-URI`, usage);
      const uri = rest[0].trim();
      try {
        parseRecordUri(uri);
      } catch (e) {
        throw new CliUsageError((e as Error).message, usage);
      }
      if (values.reason !== undefined && values.reason.length > MAX_TAKEDOWN_REASON) {
        throw new CliUsageError(
          `--reason is longer than ${MAX_TAKEDOWN_REASON} characters (${values.reason.length})`,
          usage,
        );
      }
      return known === "record takedown"
        ? { name: known, uri, reason: values.reason }
        : { name: known, uri };
    }
    case "record list": {
      only(["limit", "cursor"]);
      if (rest.length > 0) {
        throw new CliUsageError(`unexpected argument ${JSON.stringify(rest[0])}`, usage);
      }
      if (values.cursor !== undefined) {
        let authority = "";
        try {
          authority = parseRecordUri(values.cursor).authority;
        } catch (e) {
          throw new CliUsageError(`--cursor: ${(e as Error).message}`, usage);
        }
        if (!authority.startsWith("did:")) {
          throw new CliUsageError(
            `--cursor must be a URI as listed (with a DID), got ${JSON.stringify(values.cursor)}`,
            usage,
          );
        }
      }
      return {
        name: known,
        limit: values.limit === undefined ? DEFAULT_LIMIT : limit(values.limit, usage),
        cursor: values.cursor,
      };
    }
  }
}

function limit(value: string, usage: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_LIMIT) {
    throw new CliUsageError(
      `--limit must be an integer from 1 to ${MAX_LIMIT}, got ${JSON.stringify(value)}`,
      usage,
    );
  }
  return Number(value);
}

if (import.meta.main) await runCliMain("admin", runAdminCli);
