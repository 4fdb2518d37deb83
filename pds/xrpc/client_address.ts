/**
 * Who a request comes from: the client's address (honouring `PDS_TRUST_PROXY`) and the key a
 * per-client limit counts it under, where an IPv6 /64 is one client (one subscriber line gets a
 * whole /64, so its addresses are not separate clients).
 *
 * @module
 */

import type { Context } from "hono";

/** An IPv4 or IPv6 address as a proxy writes it (bounded: it becomes a map key). */
const ADDRESS_RE = /^[0-9A-Fa-f:.]{2,45}$/;

/**
 * The client's address: the connection's peer (Deno's serve info is Hono's `c.env`; "unknown"
 * in-process), or with `trustProxy` (`PDS_TRUST_PROXY`) the last `X-Forwarded-For` entry, the
 * one the reverse proxy in front appended (earlier entries are the client's to forge).
 */
export function clientAddress(c: Context, trustProxy = false): string {
  if (trustProxy) {
    const last = c.req.header("x-forwarded-for")?.split(",").at(-1)?.trim() ?? "";
    if (ADDRESS_RE.test(last)) return last.toLowerCase();
  }
  const info = c.env as Partial<Deno.ServeHandlerInfo<Deno.NetAddr>> | undefined;
  return info?.remoteAddr?.hostname ?? "unknown";
}

/**
 * The key per-client limits count `address` under: an IPv6 address as its /64 prefix
 * (`2001:db8:0:1::/64`), an IPv4-mapped IPv6 address as its IPv4 address, anything else as is.
 */
export function clientKey(address: string): string {
  if (!address.includes(":")) return address;
  // A zone (`fe80::1%eth0`) names the local interface, not the client.
  const groups = expandIpv6(address.toLowerCase().replace(/%.*$/, ""));
  if (groups === null) return address;
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return `${groups[6] >> 8}.${groups[6] & 255}.${groups[7] >> 8}.${groups[7] & 255}`;
  }
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(":")}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (a trailing dotted IPv4 allowed), or null. */
function expandIpv6(address: string): number[] | null {
  let text = address;
  const tail: number[] = [];
  const dotted = /^(.*:)(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (dotted) {
    const bytes = dotted.slice(2).map(Number);
    if (bytes.some((b) => b > 255)) return null;
    tail.push((bytes[0] << 8) | bytes[1], (bytes[2] << 8) | bytes[3]);
    text = dotted[1].endsWith("::") ? dotted[1] : dotted[1].slice(0, -1);
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const parse = (s: string) => s === "" ? [] : s.split(":");
  const head = parse(halves[0]);
  const rest = halves.length === 2 ? parse(halves[1]) : [];
  if (![...head, ...rest].every((g) => /^[0-9a-f]{1,4}$/.test(g))) return null;
  const known = head.length + rest.length + tail.length;
  if (halves.length === 1 ? known !== 8 : known > 7) return null;
  const zeros = Array<number>(8 - known).fill(0);
  return [
    ...head.map((g) => parseInt(g, 16)),
    ...zeros,
    ...rest.map((g) => parseInt(g, 16)),
    ...tail,
  ];
}
