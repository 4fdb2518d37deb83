/**
 * TLS of the index's PostgreSQL connections from the URL's libpq options (docs/operations.md,
 * "Running the index on PostgreSQL"), as the `postgres` driver offers TLS:
 *
 * | `sslmode` | TLS | certificate checked |
 * |---|---|---|
 * | absent, `disable` | no | - |
 * | `allow`, `prefer`, `require` | yes (`prefer`: when the server offers it) | no |
 * | `require` with `sslrootcert` | yes | chain (as `verify-ca`, libpq's rule) |
 * | `verify-ca` | yes | chain against `sslrootcert` (else the system's roots) |
 * | `verify-full` | yes | chain and the server's name against the URL's host |
 *
 * `sslrootcert` is a PEM file of root certificates, or `system` (the runtime's roots, and
 * `verify-full` when no `sslmode` is given, as libpq 16). `sslcert` and `sslkey` are a client
 * certificate and its key (PEM files). The driver does not read these itself: it would send them
 * to the server as settings, which refuses them, so they are read here and taken out of the URL.
 *
 * Differences from libpq: without `sslmode` there is no TLS (libpq's default is `prefer`), and the
 * server's name is checked by the runtime's TLS, which cannot check a certificate against an IP
 * address: `verify-full` needs the host as a DNS name.
 *
 * @module
 */

import type { ConnectionOptions } from "node:tls";

/** The URL for the driver and its `ssl` option (undefined: the driver's reading of the URL). */
export interface PgConnectionTarget {
  /** The URL without the options read here. */
  readonly url: string;
  readonly ssl: false | "allow" | "prefer" | "require" | ConnectionOptions | undefined;
}

/** Options of the URL this module reads (and takes out). */
const TLS_OPTIONS = ["sslmode", "sslrootcert", "sslcert", "sslkey"];
/** libpq TLS options the driver has no use for: refused rather than sent to the server. */
const UNSUPPORTED = ["sslcrl", "sslcrldir", "sslpassword", "sslsni", "sslcompression"];

/** Raised for a TLS option of the URL that cannot be used; the message names the variable. */
export class PgTlsError extends Error {
  override name = "PgTlsError";
}

/**
 * Reads the TLS options of `url` (module comment); `variable` names the setting in messages.
 *
 * @throws PgTlsError for an unknown `sslmode`, an unsupported option, or a file that cannot be
 *   read (the message names the option and the file, never the URL)
 */
export async function pgConnectionTarget(
  url: string,
  variable = "APPVIEW_DATABASE_URL",
): Promise<PgConnectionTarget> {
  const parsed = new URL(url);
  const params = parsed.searchParams;
  for (const name of UNSUPPORTED) {
    if (params.has(name)) throw new PgTlsError(`${variable}: ${name} is not supported`);
  }
  if (!TLS_OPTIONS.some((name) => params.has(name))) return { url, ssl: undefined };
  const rootcert = params.get("sslrootcert");
  const mode = params.get("sslmode") ?? (rootcert === "system" ? "verify-full" : "disable");
  const read = async (option: string): Promise<string | undefined> => {
    const path = params.get(option);
    if (path === null || (option === "sslrootcert" && path === "system")) return undefined;
    try {
      return await Deno.readTextFile(path);
    } catch (e) {
      throw new PgTlsError(
        `${variable}: ${option} ${path} cannot be read: ${e instanceof Error ? e.message : e}`,
      );
    }
  };
  const client = { cert: await read("sslcert"), key: await read("sslkey") };
  const ca = await read("sslrootcert");
  for (const name of TLS_OPTIONS) params.delete(name);
  const stripped = parsed.href;
  const verify = mode === "verify-ca" || mode === "verify-full" ||
    (mode === "require" && rootcert !== null);
  switch (mode) {
    case "disable":
      return { url: stripped, ssl: false };
    case "allow":
    case "prefer":
    case "require":
      if (!verify) {
        return {
          url: stripped,
          ssl: client.cert === undefined ? mode : { ...client, rejectUnauthorized: false },
        };
      }
      break;
    case "verify-ca":
    case "verify-full":
      break;
    default:
      throw new PgTlsError(
        `${variable}: sslmode must be disable, allow, prefer, require, verify-ca or verify-full, got ${mode}`,
      );
  }
  const ssl: ConnectionOptions = { ...client, rejectUnauthorized: true };
  if (ca !== undefined) ssl.ca = ca;
  // verify-ca (and require with a root certificate): the chain, not the name.
  if (mode !== "verify-full") ssl.checkServerIdentity = () => undefined;
  return { url: stripped, ssl };
}
