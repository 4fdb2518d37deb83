/**
 * Invite code command line (spec 4.1 rule 6), working directly on the account host's KV store
 * (the same `PDS_KV_PATH` as the server, which may be running):
 *
 * ```
 * deno task invite create --count N --uses N [--create-store]  # prints one new code per line
 * deno task invite list [--json]               # code, used/max, disabled, redeemed by
 * deno task invite disable CODE
 * ```
 *
 * The store must exist (the account host creates it on its first start): a command on a path
 * without one fails saying where it looked, since a new empty store would hold codes the server
 * never sees. `create --create-store` starts a new store, for invites made before the first start.
 *
 * Exit codes: 0 success, 1 failure (for example an unknown code or no store), 2 bad arguments.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { loadPdsConfig } from "../pds/config.ts";
import {
  type CliIo,
  CliUsageError,
  openStoreForCli,
  parseCliArgs,
  runCliMain,
} from "./_pds_store.ts";
import { createInviteCodes, disableInviteCode, listInviteCodes } from "../pds/accounts/invites.ts";

const USAGE = `Usage:
  invite create --count <n> --uses <n> [--create-store]
  invite list [--json]
  invite disable <code>`;

const MAX_COUNT = 1000;
const MAX_USES = 1_000_000;

/** A command line mistake: printed with the usage, exit code 2. */

/** Runs the command line; returns the exit code. Output goes to `out`/`err` (lines). */
export async function runInviteCli(
  args: string[],
  env: Record<string, string | undefined>,
  io: CliIo,
): Promise<number> {
  const command = parseCliArgs("invite", io, USAGE, () => parseCommand(args));
  if (command === null) return 2;
  const config = loadPdsConfig(env);
  const kv = await openStoreForCli("invite", io, config, {
    env,
    create: command.name === "create" && command.createStore,
    hint: "set DATA_DIR or PDS_KV_PATH to the account host's, or pass --create-store " +
      "to start a new one",
  });
  if (kv === null) return 1;
  try {
    switch (command.name) {
      case "create": {
        const codes = await createInviteCodes(kv, { count: command.count, uses: command.uses });
        for (const invite of codes) io.out(invite.code);
        return 0;
      }
      case "list": {
        const invites = await listInviteCodes(kv);
        for (const invite of invites) {
          if (command.json) {
            io.out(JSON.stringify({
              code: invite.code,
              used_count: invite.usedCount,
              max_uses: invite.maxUses,
              disabled: invite.disabled,
              created_at: invite.createdAt,
              redeemed_by: invite.redeemedBy.map((u) => u.did),
            }));
          } else {
            const state = invite.disabled ? "disabled" : "enabled";
            const by = invite.redeemedBy.map((u) => u.did).join(",") || "-";
            io.out(`${invite.code}\t${invite.usedCount}/${invite.maxUses}\t${state}\t${by}`);
          }
        }
        if (!command.json && invites.length === 0) io.err("No invite codes");
        return 0;
      }
      case "disable": {
        if (!(await disableInviteCode(kv, command.code))) {
          io.err(`invite: invite code not found: ${JSON.stringify(command.code)}`);
          return 1;
        }
        io.out(`Disabled ${command.code}`);
        return 0;
      }
    }
  } finally {
    kv.close();
  }
}

type Command =
  | { name: "create"; count: number; uses: number; createStore: boolean }
  | { name: "list"; json: boolean }
  | { name: "disable"; code: string };

function parseCommand(args: string[]): Command {
  const { values, positionals } = parseArgs({
    args,
    options: {
      count: { type: "string" },
      uses: { type: "string" },
      json: { type: "boolean", default: false },
      "create-store": { type: "boolean", default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  const [name, ...rest] = positionals;
  switch (name) {
    case "create": {
      noExtra(rest);
      if (values.json) throw new CliUsageError("--json applies to list only");
      return {
        name,
        count: positiveInt("--count", values.count, MAX_COUNT),
        uses: positiveInt("--uses", values.uses, MAX_USES),
        createStore: values["create-store"] ?? false,
      };
    }
    case "list":
      noExtra(rest);
      if (values.count !== undefined || values.uses !== undefined) {
        throw new CliUsageError("--count and --uses apply to create only");
      }
      if (values["create-store"]) throw new CliUsageError("--create-store applies to create only");
      return { name, json: values.json ?? false };
    case "disable": {
      if (rest.length !== 1 || rest[0].trim() === "") {
        throw new CliUsageError("disable takes exactly one invite code");
      }
      if (
        values.count !== undefined || values.uses !== undefined || values.json ||
        values["create-store"]
      ) {
        throw new CliUsageError("disable takes no options");
      }
      return { name, code: rest[0].trim() };
    }
    case undefined:
      throw new CliUsageError("missing command");
    default:
      throw new CliUsageError(`unknown command ${JSON.stringify(name)}`);
  }
}

function noExtra(rest: string[]): void {
  if (rest.length > 0) throw new CliUsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
}

function positiveInt(flag: string, value: string | undefined, max: number): number {
  if (value === undefined) throw new CliUsageError(`${flag} is required`);
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > max) {
    throw new CliUsageError(
      `${flag} must be an integer from 1 to ${max}, got ${JSON.stringify(value)}`,
    );
  }
  return Number(value);
}

if (import.meta.main) await runCliMain("invite", runInviteCli);
