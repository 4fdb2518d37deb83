/**
 * Moderation reports (`com.atproto.moderation.createReport`, docs/protocol.md 2): members report
 * an account or a record; the reports are kept in the account host's store for the operator, who
 * lists and resolves them with `deno task admin reports ...`. Ids count up from 1.
 *
 * The operator can act only on what this host holds, so a subject must exist here
 * ({@link checkReportSubject}): an account of this host (taken down or deactivated ones too), or
 * a record of one at exactly the reported CID (a record the operator took down and holds too).
 *
 * @module
 */

import { countGraphemes } from "../../shared/graphemes.ts";
import { isValidAtUri } from "../../shared/syntax.ts";
import { formatCid, parseCid } from "../../shared/cid.ts";
import { AtUriError, parseAtUri } from "../../shared/at_uri.ts";
import { getAccount, getDidForHandle, isLookupDid } from "../accounts/accounts.ts";
import { repoRecordKey, reportKey, reportPrefix, reportSeqKey } from "../store/keys.ts";
import type { StoredRecord } from "../repo/repo_root.ts";
import { getRecordTakedown } from "./record_takedown_reads.ts";

/** Subject `$type` of a report about an account. */
export const REPO_REF_TYPE = "com.atproto.admin.defs#repoRef";
/** Subject `$type` of a report about a record. */
export const STRONG_REF_TYPE = "com.atproto.repo.strongRef";

/** The reason types of `com.atproto.moderation.defs#reasonType`. */
export const REASON_TYPES: readonly string[] = [
  "reasonSpam",
  "reasonViolation",
  "reasonMisleading",
  "reasonSexual",
  "reasonRude",
  "reasonOther",
  "reasonAppeal",
].map((r) => `com.atproto.moderation.defs#${r}`);

/** Ozone's finer reason types (`tools.ozone.report.defs#reason...`), taken as they come. */
const OZONE_REASON = /^tools\.ozone\.report\.defs#reason[A-Z][A-Za-z]{0,63}$/;

/** Limits of `reason` (the lexicon's). */
export const MAX_REASON_LENGTH = 20_000;
export const MAX_REASON_GRAPHEMES = 2_000;

const MAX_COMMIT_ATTEMPTS = 50;

/** What a report is about. */
export type ReportSubject =
  | { $type: typeof REPO_REF_TYPE; did: string }
  | { $type: typeof STRONG_REF_TYPE; uri: string; cid: string };

/** A stored report; the first six members are createReport's answer. */
export interface Report {
  id: number;
  reasonType: string;
  reason?: string;
  subject: ReportSubject;
  reportedBy: string;
  createdAt: string;
  status: "open" | "resolved";
  resolvedAt?: string;
  note?: string;
}

/** A report input the lexicon refuses; the message names the member and the value. */
export class ReportError extends Error {
  override readonly name = "ReportError";
}

/**
 * Checks a createReport body and returns its parts.
 *
 * @throws {ReportError}
 */
export function parseReportInput(
  body: Record<string, unknown>,
): { reasonType: string; reason?: string; subject: ReportSubject } {
  const { reasonType, reason, subject } = body;
  if (typeof reasonType !== "string") throw new ReportError("Member reasonType is required");
  if (!REASON_TYPES.includes(reasonType) && !OZONE_REASON.test(reasonType)) {
    throw new ReportError(`Unknown reasonType: ${show(reasonType)}`);
  }
  if (reason !== undefined && typeof reason !== "string") {
    throw new ReportError("Member reason must be a string");
  }
  if (
    reason !== undefined &&
    (reason.length > MAX_REASON_LENGTH || countGraphemes(reason) > MAX_REASON_GRAPHEMES)
  ) {
    throw new ReportError(
      `Member reason is longer than ${MAX_REASON_GRAPHEMES} characters or ${MAX_REASON_LENGTH} ` +
        "code units",
    );
  }
  return { reasonType, ...(reason === undefined ? {} : { reason }), subject: toSubject(subject) };
}

function toSubject(subject: unknown): ReportSubject {
  if (typeof subject !== "object" || subject === null || Array.isArray(subject)) {
    throw new ReportError("Member subject must be an object");
  }
  const s = subject as Record<string, unknown>;
  switch (s.$type) {
    case REPO_REF_TYPE:
      if (typeof s.did !== "string" || !isLookupDid(s.did)) {
        throw new ReportError(`Report subject did is not a DID: ${show(s.did)}`);
      }
      return { $type: REPO_REF_TYPE, did: s.did };
    case STRONG_REF_TYPE: {
      if (typeof s.uri !== "string" || !isValidAtUri(s.uri)) {
        throw new ReportError(`Report subject uri is not an AT-URI: ${show(s.uri)}`);
      }
      let cid: string;
      try {
        cid = formatCid(parseCid(s.cid as string));
      } catch {
        throw new ReportError(`Report subject cid is not a CID: ${show(s.cid)}`);
      }
      return { $type: STRONG_REF_TYPE, uri: s.uri, cid };
    }
    default:
      throw new ReportError(
        `Report subject $type must be ${REPO_REF_TYPE} or ${STRONG_REF_TYPE}, got ${show(s.$type)}`,
      );
  }
}

/**
 * Checks that the subject of a report exists on this host (module comment).
 *
 * @throws {ReportError} naming the subject
 */
export async function checkReportSubject(kv: Deno.Kv, subject: ReportSubject): Promise<void> {
  if (subject.$type === REPO_REF_TYPE) {
    if (await getAccount(kv, subject.did) === null) {
      throw new ReportError(`Report subject account not found: ${show(subject.did)}`);
    }
    return;
  }
  let parsed;
  try {
    parsed = parseAtUri(subject.uri);
  } catch (err) {
    if (!(err instanceof AtUriError)) throw err;
    throw new ReportError(`Report subject uri is not a record URI: ${show(subject.uri)}`);
  }
  const { authority, collection, rkey } = parsed;
  const did = authority.startsWith("did:") ? authority : await getDidForHandle(kv, authority);
  if (did === null || !isLookupDid(did) || await getAccount(kv, did) === null) {
    throw new ReportError(
      `Report subject record not found: ${show(subject.uri)} (no such account)`,
    );
  }
  const stored = (await kv.get<StoredRecord>(repoRecordKey(did, collection, rkey))).value;
  // A record the operator took down is held, not gone: it can still be reported.
  const cid = stored?.cid ?? (await getRecordTakedown(kv, did, collection, rkey))?.cid;
  if (cid === undefined) {
    throw new ReportError(`Report subject record not found: ${show(subject.uri)}`);
  }
  if (cid !== subject.cid) {
    throw new ReportError(
      `Report subject record ${show(subject.uri)} is at cid ${show(cid)}, not ${show(subject.cid)}`,
    );
  }
}

/** Stores a new open report by `reportedBy` and returns it. */
export async function createReport(
  kv: Deno.Kv,
  input: { reasonType: string; reason?: string; subject: ReportSubject; reportedBy: string },
  nowMs: number,
): Promise<Report> {
  for (let attempt = 0; attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
    const seq = await kv.get<number>(reportSeqKey());
    const id = (seq.value ?? 0) + 1;
    const report: Report = {
      id,
      reasonType: input.reasonType,
      ...(input.reason === undefined ? {} : { reason: input.reason }),
      subject: input.subject,
      reportedBy: input.reportedBy,
      createdAt: new Date(nowMs).toISOString(),
      status: "open",
    };
    const res = await kv.atomic()
      .check(seq)
      .set(reportSeqKey(), id)
      .set(reportKey(id), report)
      .commit();
    if (res.ok) return report;
  }
  throw new Error("Report creation lost too many commit races");
}

/** Every report by id, or only the open ones. */
export async function listReports(kv: Deno.Kv, opts: { all: boolean }): Promise<Report[]> {
  const reports: Report[] = [];
  for await (const entry of kv.list<Report>({ prefix: reportPrefix() })) {
    if (opts.all || entry.value.status === "open") reports.push(entry.value);
  }
  return reports;
}

/**
 * Marks report `id` resolved, with an optional note. Returns the report, or a string saying why
 * not (no such report, already resolved).
 */
export async function resolveReport(
  kv: Deno.Kv,
  id: number,
  opts: { note?: string; nowMs: number },
): Promise<Report | string> {
  for (let attempt = 0; attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
    const entry = await kv.get<Report>(reportKey(id));
    if (entry.value === null) return `no report ${id}`;
    if (entry.value.status === "resolved") return `report ${id} is already resolved`;
    const resolved: Report = {
      ...entry.value,
      status: "resolved",
      resolvedAt: new Date(opts.nowMs).toISOString(),
      ...(opts.note === undefined ? {} : { note: opts.note }),
    };
    if ((await kv.atomic().check(entry).set(entry.key, resolved).commit()).ok) return resolved;
  }
  throw new Error("Report resolution lost too many commit races");
}

function show(value: unknown): string {
  if (value === undefined) return "(missing)";
  const s = typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
  return JSON.stringify(s.length > 100 ? s.slice(0, 100) + "..." : s);
}
