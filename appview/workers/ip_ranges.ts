/**
 * Address classification for outbound fetches: which IP addresses the index must not reach on
 * behalf of data it received (a DID document naming a host), so that such data cannot make the
 * index probe the operator's network.
 *
 * @module
 */

/** Why an address is not public, or null when it is a public unicast address. */
export type AddressClass =
  | "unspecified"
  | "loopback"
  | "private"
  | "link-local"
  | "shared"
  | "multicast"
  | "reserved"
  | "mapped"
  | "unique-local";

/** Parses a dotted-quad IPv4 address into 4 bytes; null when it is not one. */
export function parseIpv4(s: string): Uint8Array | null {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    if (!/^\d{1,3}$/.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    out[i] = n;
  }
  return out;
}

/**
 * Parses an IPv6 address (with `::` compression, an optional dotted IPv4 tail, optional
 * brackets and an optional `%zone`) into 16 bytes; null when it is not one.
 */
export function parseIpv6(s: string): Uint8Array | null {
  let text = s.startsWith("[") && s.endsWith("]") ? s.slice(1, -1) : s;
  const zone = text.indexOf("%");
  if (zone >= 0) text = text.slice(0, zone);
  if (!text.includes(":")) return null;
  const out = new Uint8Array(16);
  let tail: Uint8Array | null = null;
  const lastColon = text.lastIndexOf(":");
  if (text.slice(lastColon + 1).includes(".")) {
    tail = parseIpv4(text.slice(lastColon + 1));
    if (tail === null) return null;
    text = text.slice(0, lastColon + 1) + "0:0";
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const head = halves[0] === "" ? [] : halves[0].split(":");
  const rest = halves.length === 2 ? (halves[1] === "" ? [] : halves[1].split(":")) : [];
  const groups = head.length + rest.length;
  if (halves.length === 1 ? groups !== 8 : groups > 7) return null;
  const words = [...head, ...Array(8 - groups).fill("0"), ...rest];
  for (let i = 0; i < 8; i++) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(words[i])) return null;
    const n = parseInt(words[i], 16);
    out[i * 2] = n >> 8;
    out[i * 2 + 1] = n & 0xff;
  }
  if (tail !== null) out.set(tail, 12);
  return out;
}

/** Classifies an IPv4 address (4 bytes); null for public unicast. */
export function classifyIpv4(b: Uint8Array): AddressClass | null {
  const [a, c] = [b[0], b[1]];
  if (a === 0) return "unspecified"; // 0.0.0.0/8, "this network"
  if (a === 127) return "loopback";
  if (a === 10) return "private";
  if (a === 172 && c >= 16 && c <= 31) return "private";
  if (a === 192 && c === 168) return "private";
  if (a === 169 && c === 254) return "link-local";
  if (a === 100 && c >= 64 && c <= 127) return "shared"; // 100.64/10, carrier-grade NAT
  if (a === 192 && c === 0 && b[2] === 0) return "reserved"; // 192.0.0/24, IETF protocol
  if (a === 198 && (c === 18 || c === 19)) return "reserved"; // 198.18/15, benchmarking
  if (a >= 224 && a <= 239) return "multicast";
  if (a >= 240) return "reserved"; // 240/4 and the broadcast address
  return null;
}

/** Classifies an IPv6 address (16 bytes); null for public unicast. */
export function classifyIpv6(b: Uint8Array): AddressClass | null {
  const zeroPrefix = (n: number) => b.subarray(0, n).every((x) => x === 0);
  if (zeroPrefix(16)) return "unspecified"; // ::
  if (zeroPrefix(15) && b[15] === 1) return "loopback"; // ::1
  if (zeroPrefix(10) && b[10] === 0xff && b[11] === 0xff) return "mapped"; // ::ffff:0:0/96
  if (zeroPrefix(12)) return "mapped"; // ::/96, deprecated IPv4-compatible
  if ((b[0] & 0xfe) === 0xfc) return "unique-local"; // fc00::/7
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0x80) return "link-local"; // fe80::/10
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0xc0) return "private"; // fec0::/10, site-local
  if (b[0] === 0xff) return "multicast";
  // Prefixes that embed an IPv4 address the network may route to: judge the IPv4 part.
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b) { // 64:ff9b::/96 NAT64
    return classifyIpv4(b.subarray(12, 16));
  }
  if (b[0] === 0x20 && b[1] === 0x02) return classifyIpv4(b.subarray(2, 6)); // 2002::/16 6to4
  return null;
}

/**
 * Classifies an IP address literal (IPv4 dotted quad or IPv6, brackets allowed): null for a
 * public unicast address, the reason otherwise. Returns undefined when `s` is not an IP literal.
 */
export function classifyAddress(s: string): AddressClass | null | undefined {
  const v4 = parseIpv4(s);
  if (v4 !== null) return classifyIpv4(v4);
  const v6 = parseIpv6(s);
  if (v6 !== null) return classifyIpv6(v6);
  return undefined;
}
